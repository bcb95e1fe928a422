"""Conversions between pydantic events, SQL column values and typed Arrow data.

A topic stores one SQL column per event field (after the log's metadata columns) and is
exposed as an Arrow schema that Spark can read: no union, dictionary or extension types.
``TopicSchema`` maps annotations to columns once and precompiles the per-event functions.

SQL value conventions: datetimes are fixed-width UTC ISO text
(``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``, so text order is time order); **naive datetimes are
taken as UTC** and decoded datetimes are always tz-aware UTC. Dates, times and decimals are
text, durations are integer microseconds, and nested values (models, lists, sets, dicts,
``Any``, unions) are compact JSON text.

Example::

    schema = TopicSchema.from_events("customers", [Created, Renamed])
    row = schema.encoder("Created")(Created(name="Ada"))
    assert schema.decode("Created", row) == Created(name="Ada")
"""

from __future__ import annotations

import base64
import collections.abc as abc
import hashlib
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from functools import partial
from typing import Annotated, Any, Literal, NoReturn, Union
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from .errors import SchemaMismatchError, SpecError, UnknownEventTypeError
from .spec import Event, check_field_names, union_members

__all__ = ["META_FIELDS", "META_NAMES", "META_SQL_KINDS", "Column", "SqlKind", "TopicSchema"]

SqlKind = Literal["int", "float", "bool", "text", "blob", "json"]
_Conv = Callable[[Any], Any]
_Fn = Callable[..., Any]

_TS = pa.timestamp("us", tz="UTC")
_US = pa.duration("us")
_ENC = "reventless.encoding"  # field metadata: "json" (JSON text) or a nested bytes encoding
_LO, _HI = -(2**63), 2**63 - 1
_TD: TypeAdapter[timedelta] = TypeAdapter(timedelta)
# one shared encoder: json.dumps with options builds a new JSONEncoder per call
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads
_ERRORS = (KeyError, AttributeError, TypeError, ValueError, OverflowError)
_ARROW_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError)
_NOT_NULL = ("_offset", "_row_idx", "_produced_at", "_type", "_schema_version", "_msg_id")

META_FIELDS: tuple[pa.Field, ...] = tuple(
    pa.field(n, t, nullable=n not in _NOT_NULL)
    for n, t in [
        ("_offset", pa.int64()),
        ("_row_idx", pa.int32()),
        ("_produced_at", _TS),
        ("_aggregate_id", pa.string()),
        ("_version", pa.int64()),
        ("_type", pa.string()),
        ("_schema_version", pa.int32()),
        ("_msg_id", pa.string()),
        *((n, pa.string()) for n in ("_correlation_id", "_causation_id", "_user")),
        *((n, pa.string()) for n in ("_service", "_ip", "_tenant")),
    ]
)
"""The log's metadata columns, in storage order, before every topic's field columns."""

META_NAMES: tuple[str, ...] = tuple(f.name for f in META_FIELDS)
"""Names of ``META_FIELDS``, same order."""

META_SQL_KINDS: tuple[SqlKind, ...] = tuple(
    "text" if pa.types.is_string(f.type) else "int" for f in META_FIELDS
)
"""SQL kinds of ``META_FIELDS``; ``_produced_at`` is stored as epoch microseconds."""


@dataclass(frozen=True, slots=True)
class Column:
    """One field column of a topic: its Arrow type, SQL storage kind and nullability."""

    name: str
    arrow_type: pa.DataType
    sql_kind: SqlKind
    nullable: bool


def _dt_text(v: datetime) -> str:
    v = v.replace(tzinfo=UTC) if v.utcoffset() is None else v.astimezone(UTC)
    return v.isoformat(timespec="microseconds")


def _time_text(v: time) -> str:
    if v.tzinfo is not None:
        raise ValueError(f"time {v} has a tzinfo, which Arrow time64 cannot hold")
    return v.isoformat(timespec="microseconds")


def _td_micros(v: timedelta) -> int:
    n = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if not _LO <= n <= _HI:
        raise ValueError(f"duration {v} overflows int64 microseconds")
    return n


def _oor(column: str, v: int) -> NoReturn:
    raise SchemaMismatchError(f"column {column!r}: integer {v} does not fit in int64")


def _fail(what: str, exc: BaseException) -> NoReturn:
    raise SchemaMismatchError(f"{what}: {exc}") from exc


# -- Arrow types: families, SQL kinds, canonical text ---------------------------------------


def _is_str(t: Any) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_bin(t: Any) -> bool:
    T = pa.types
    return bool(T.is_binary(t) or T.is_large_binary(t) or T.is_fixed_size_binary(t))


def _is_list(t: Any) -> bool:
    T = pa.types
    return bool(T.is_list(t) or T.is_large_list(t) or T.is_fixed_size_list(t))


def _fields(t: Any) -> list[Any]:
    return [t.field(i) for i in range(t.num_fields)]


def _enc(f: Any) -> bytes | None:
    value: bytes | None = (f.metadata or {}).get(_ENC.encode())
    return value


def _pylist(a: Any) -> list[Any]:
    values: list[Any] = a.to_pylist()
    return values


def _recast(a: Any, t: Any) -> Any:
    return a if a.type.equals(t) else a.cast(t)


@dataclass(frozen=True, slots=True)
class _Leaf:
    """How one family of scalar Arrow types is stored in SQL and carried in JSON."""

    test: _Conv
    kind: SqlKind
    to_arrow: Callable[[Sequence[Any], Any], Any] = pa.array  # (SQL values, type) -> array
    from_arrow: _Conv = _pylist  # array -> SQL values
    enc: _Conv | None = None  # row-dict value -> SQL value (None: as is)
    dec: _Conv | None = None  # SQL value -> row-dict value
    js: tuple[_Conv, _Conv] | None = None  # (JSON value -> Arrow value, and back) inside JSON


def _ts_text(a: Any) -> list[Any]:
    # 5x faster than pc.strftime: a naive "us" timestamp casts to "YYYY-MM-DD HH:MM:SS.ffffff"
    text = a.cast(_TS).cast(pa.timestamp("us")).cast(pa.string())
    text = pc.replace_substring(text, " ", "T", max_replacements=1)
    return _pylist(pc.binary_join_element_wise(text, "+00:00", ""))


_LEAVES: dict[str, _Leaf] = {
    "int": _Leaf(pa.types.is_integer, "int"),
    "float": _Leaf(pa.types.is_floating, "float"),
    "bool": _Leaf(pa.types.is_boolean, "bool", lambda vs, t: _bools(vs), dec=bool),
    "str": _Leaf(_is_str, "text"),
    "bin": _Leaf(_is_bin, "blob", dec=lambda v: v if type(v) is bytes else bytes(v)),
    "ts": _Leaf(
        pa.types.is_timestamp,
        "text",
        lambda vs, t: _recast(pa.array(vs, pa.string()).cast(_TS), t),
        _ts_text,
        _dt_text,
        datetime.fromisoformat,
        (datetime.fromisoformat, _dt_text),
    ),
    "date": _Leaf(
        pa.types.is_date,
        "text",
        lambda vs, t: _recast(pa.array(vs, pa.string()).cast(pa.date32()), t),
        lambda a: _pylist(a.cast(pa.date32()).cast(pa.string())),
        date.isoformat,
        date.fromisoformat,
        (date.fromisoformat, date.isoformat),
    ),
    "time": _Leaf(
        pa.types.is_time,
        "text",
        lambda vs, t: pa.array([None if v is None else time.fromisoformat(v) for v in vs], t),
        lambda a: [None if v is None else _time_text(v) for v in a.to_pylist()],
        _time_text,
        time.fromisoformat,
        (time.fromisoformat, time.isoformat),
    ),
    "dec": _Leaf(
        pa.types.is_decimal,
        "text",
        lambda vs, t: pa.array(vs, pa.string()).cast(t),
        lambda a: _pylist(a.cast(pa.string())),
        lambda v: str(v if isinstance(v, Decimal) else Decimal(str(v))),
        Decimal,
        (lambda v: Decimal(v if isinstance(v, str) else str(v)), str),
    ),
    "dur": _Leaf(
        pa.types.is_duration,
        "int",
        lambda vs, t: _recast(pa.array(vs, _US), t),
        lambda a: _pylist(a.cast(_US).cast(pa.int64())),
        _td_micros,
        lambda n: timedelta(microseconds=n),
        (_TD.validate_python, lambda v: _TD.dump_python(v, mode="json")),
    ),
}


def _bools(values: Sequence[Any]) -> Any:
    try:
        return pa.array(values, pa.bool_())
    except (pa.ArrowException, TypeError):  # SQLite hands booleans back as 0/1
        return pa.array([None if v is None else bool(v) for v in values], pa.bool_())


def _family(t: Any) -> str:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return str(t.id)
    if _is_list(t):
        return "list"
    return next((name for name, leaf in _LEAVES.items() if leaf.test(t)), str(t))


def _arrow_kind(t: Any, enc: bytes | None, where: str) -> SqlKind:
    """SQL kind of an Arrow type; rejects what Spark or the JSON encoding cannot carry."""
    nested = [(f, f"{where}.{f.name}") for f in _fields(t)] if pa.types.is_struct(t) else []
    if pa.types.is_struct(t) and not nested:
        raise SpecError(f"{where}: a struct without fields cannot be written to Parquet")
    if _is_list(t):
        nested = [(t.value_field, f"{where}[]")]
    if pa.types.is_map(t):
        if not _is_str(t.key_type):  # nested values are JSON, whose object keys are strings
            raise SpecError(f"{where}: map keys must be strings, got {t.key_type}")
        nested = [(t.item_field, f"{where}{{}}")]
    for f, w in nested:
        _arrow_kind(f.type, _enc(f), w)
    if nested or (enc == b"json" and _is_str(t)):
        return "json"
    leaf = _LEAVES.get(_family(t)) if not pa.types.is_dictionary(t) else None
    if leaf is None:
        raise SpecError(f"{where}: Arrow type {t} is not supported (no union/dictionary/extension)")
    return leaf.kind


def _type_text(t: Any) -> str:
    """Canonical text of a type, nested nullability and field metadata included."""
    if pa.types.is_struct(t):
        return "struct<" + ",".join(_field_text(f, True) for f in _fields(t)) + ">"
    if pa.types.is_map(t):
        return f"map<{_type_text(t.key_type)},{_field_text(t.item_field, False)}>"
    if _is_list(t):  # item names differ between writers ("item", "element"): not identity
        size = f"[{t.list_size}]" if pa.types.is_fixed_size_list(t) else ""
        return f"{str(t).split('<')[0]}{size}<{_field_text(t.value_field, False)}>"
    return str(t)


def _field_text(f: Any, named: bool) -> str:
    meta = sorted((f.metadata or {}).items())
    tail = "".join(f"[{k.decode(errors='replace')}={v.decode(errors='replace')}]" for k, v in meta)
    return f"{f.name + ':' if named else ''}{_type_text(f.type)}{'' if f.nullable else '!'}{tail}"


# -- JSON values <-> Arrow python values, inside json columns ------------------------------


def _struct_conv(pairs: list[tuple[str, _Conv]]) -> _Conv | None:
    def conv(v: dict[str, Any]) -> dict[str, Any]:
        out = dict(v)
        for key, c in pairs:
            if out.get(key) is not None:
                out[key] = c(out[key])
        return out

    return conv if pairs else None


def _each(c: _Conv | None, mapping: bool) -> _Conv | None:
    if c is None:
        return None
    if mapping:  # Arrow maps come back as dicts (maps_as_pydicts) or as (key, value) pairs
        return lambda v: {k: None if x is None else c(x) for k, x in dict(v).items()}
    return lambda v: [None if x is None else c(x) for x in v]


def _json_conv(t: Any, enc: bytes | None) -> tuple[_Conv | None, _Conv | None]:
    """(JSON value -> Arrow python value, Arrow python value -> JSON value); None: as is."""
    if enc == b"json":
        return _dumps, _loads
    if pa.types.is_struct(t):
        kids = [(f.name, *_json_conv(f.type, _enc(f))) for f in _fields(t)]
        return (
            _struct_conv([(n, p) for n, p, _ in kids if p is not None]),
            _struct_conv([(n, j) for n, _, j in kids if j is not None]),
        )
    if _is_list(t) or pa.types.is_map(t):
        item = t.value_field if _is_list(t) else t.item_field
        p, j = _json_conv(item.type, _enc(item))
        return _each(p, pa.types.is_map(t)), _each(j, pa.types.is_map(t))
    if _is_bin(t):
        if enc == b"utf8":
            return str.encode, bytes.decode
        if enc == b"hex":
            return bytes.fromhex, bytes.hex
        # pydantic writes url-safe base64; urlsafe_b64decode also reads the standard alphabet
        return base64.urlsafe_b64decode, lambda b: base64.urlsafe_b64encode(b).decode()
    leaf = _LEAVES.get(_family(t))
    return leaf.js if leaf is not None and leaf.js is not None else (None, None)


@dataclass(frozen=True, slots=True)
class _ColCodec:
    to_arrow: Callable[[Sequence[Any]], Any]  # SQL values -> Arrow array
    from_arrow: Callable[[Any], list[Any]]  # Arrow array -> SQL values
    enc: _Conv | None  # row-dict value -> SQL value (schema topics); None: as is
    dec: _Conv | None  # SQL value -> row-dict value


def _col_codec(t: Any, kind: SqlKind) -> _ColCodec:
    if kind == "json" and _is_str(t):  # Any / unions: the Arrow column holds the JSON text
        return _ColCodec(partial(pa.array, type=t), _pylist, _dumps, _loads)
    if kind == "json":
        p, j = _json_conv(t, None)
        load: _Conv = _loads if p is None else (lambda s: p(_loads(s)))
        dump: _Conv = _dumps if j is None else (lambda v: _dumps(j(v)))
        # maps_as_pydicts makes to_pylist ~30x slower: only ask for it when there is a map
        dicts = "strict" if "map<" in _type_text(t) else None
        return _ColCodec(
            lambda vs: pa.array([None if v is None else load(v) for v in vs], t),
            lambda a: [None if v is None else dump(v) for v in a.to_pylist(maps_as_pydicts=dicts)],
            dump,
            load,
        )
    if pa.types.is_timestamp(t) and kind == "int":  # _produced_at: epoch microseconds
        return _ColCodec(
            lambda vs: _recast(pa.array(vs, _TS), t),
            lambda a: a.cast(_TS).cast(pa.int64()).to_pylist(),
            None,
            None,
        )
    leaf = _LEAVES[_family(t)]
    return _ColCodec(lambda vs: leaf.to_arrow(vs, t), leaf.from_arrow, leaf.enc, leaf.dec)


def _cast_safely(arr: Any, target: Any, where: str) -> Any:
    # Arrow's safe cast still parses strings into numbers: require the same family first
    src, dst = _family(arr.type), _family(target)
    if not (pa.types.is_null(arr.type) or src == dst or (src, dst) == ("int", "float")):
        raise SchemaMismatchError(f"{where}: has type {arr.type}, expected {target}")
    try:
        return arr.cast(target, safe=True)
    except _ARROW_ERRORS as exc:
        raise SchemaMismatchError(f"{where}: cannot cast {arr.type} to {target}: {exc}") from exc


# -- annotations -> Arrow types --------------------------------------------------------------

_Mapped = tuple[Any, bool, "dict[str, str] | None", str]  # arrow type, nullable, metadata, tag
_SCALARS: tuple[tuple[type, Any, str], ...] = (
    (bool, pa.bool_(), "bool"),
    (int, pa.int64(), "int"),
    (float, pa.float64(), "float"),
    (str, pa.string(), "str"),
    (bytes, pa.binary(), "bytes"),
    (datetime, _TS, "dt"),
    (date, pa.date32(), "date"),
    (time, pa.time64("us"), "time"),
    (timedelta, _US, "td"),
    (UUID, pa.string(), "uuid"),
)
_LITERALS: tuple[tuple[type, Any], ...] = (
    (bool, pa.bool_()),
    (int, pa.int64()),
    (str, pa.string()),
)
_SEQUENCES = (list, tuple, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Set)


def _complete(model: type[BaseModel]) -> type[BaseModel]:
    try:
        model.__pydantic_complete__ or model.model_rebuild()
    except Exception as exc:  # pydantic raises several error types for unresolved names
        raise SpecError(f"model {model.__name__} is not fully defined: {exc}") from exc
    return model


def _decimal_bounds(meta: Sequence[Any]) -> tuple[int | None, int | None]:
    digits = places = None
    for m in meta:
        for x in m.metadata if isinstance(m, FieldInfo) else [m]:
            digits = getattr(x, "max_digits", None) or digits
            places = getattr(x, "decimal_places", places)
    return digits, places


def _map_ann(
    ann: Any, meta: Sequence[Any], where: str, bmode: str | None, seen: tuple[type, ...]
) -> _Mapped:
    """Map an annotation to (arrow type, nullable, field metadata, conversion tag).

    ``bmode`` is the JSON bytes encoding of the enclosing value (None at the top level,
    where bytes are a blob column); nested bytes carry it as field metadata.
    """
    while typing.get_origin(ann) is Annotated or isinstance(ann, typing.NewType):
        if isinstance(ann, typing.NewType):
            ann = ann.__supertype__
        else:
            ann, *extra = typing.get_args(ann)
            meta = [*meta, *extra]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    inner = bmode or "utf8"  # pydantic's default when it serialises a bare container
    is_type = isinstance(ann, type)
    if ann is Any:
        return pa.string(), True, {_ENC: "json"}, "json"
    if origin is Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            t, _, md, tag = _map_ann(rest[0], meta, where, bmode, seen)
            return t, True, md, tag
        return pa.string(), len(rest) < len(args), {_ENC: "json"}, "json"
    if origin is Literal:
        values = [a for a in args if a is not None]
        for py, t in _LITERALS:
            if values and all(type(v) is py for v in values):
                return t, len(values) < len(args), None, "lit"
        raise SpecError(f"{where}: Literal values must be all str, all int or all bool")
    if origin in _SEQUENCES:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise SpecError(f"{where}: only tuple[X, ...] is supported, got {ann!r}")
        t, n, md, _ = _map_ann(args[0], (), f"{where}[]", inner, seen)
        return pa.list_(pa.field("element", t, n, md)), False, None, "json"
    if origin is dict or origin is abc.Mapping:
        if args[0] is not str:
            raise SpecError(f"{where}: dict keys must be str, got {ann!r}")
        t, n, md, _ = _map_ann(args[1], (), f"{where}{{}}", inner, seen)
        return pa.map_(pa.string(), pa.field("value", t, n, md)), False, None, "json"
    if is_type and issubclass(ann, Enum):
        values = [m.value for m in ann]
        for py, t in _LITERALS[1:]:
            if values and all(type(v) is py or (py is str and isinstance(v, str)) for v in values):
                return t, False, None, "enum"
        raise SpecError(f"{where}: enum {ann.__name__} values must be all str or all int")
    if is_type and issubclass(ann, BaseModel):
        if ann in seen or not _complete(ann).model_fields:
            raise SpecError(f"{where}: nested model {ann.__name__} is recursive or has no fields")
        mode = str(ann.model_config.get("ser_json_bytes", "utf8"))
        kids = []
        for name, info in ann.model_fields.items():
            t, n, md, _ = _map_ann(
                info.annotation, info.metadata, f"{where}.{name}", mode, (*seen, ann)
            )
            kids.append(pa.field(info.serialization_alias or name, t, n, md))
        return pa.struct(kids), False, None, "json"
    if is_type and issubclass(ann, Decimal):
        digits, places = _decimal_bounds(meta)
        if digits is not None and places is not None and 0 <= places <= digits <= 38:
            return pa.decimal128(digits, places), False, None, "dec"
        return pa.string(), False, None, "dec"  # str(value): exact, any size
    for py, t, tag in _SCALARS if is_type else ():
        if issubclass(ann, py):
            return t, False, {_ENC: bmode} if tag == "bytes" and bmode else None, tag
    raise SpecError(f"{where}: unsupported type {ann!r}")


# -- per-event codecs: generated code, since this is the per-event hot path -----------------


@dataclass(frozen=True, slots=True)
class _Slot:
    col: int  # column index
    attr: str  # model field name
    key: str  # model_validate input key
    tag: str
    nullable: bool  # the annotation admits None
    optional: bool  # the field has a default
    plain: bool  # exactly str/int/float/bool, unconstrained: safe to set unvalidated
    dump: _Conv | None  # JSON text of a json-tagged value


_ENC_CONV: dict[str, _Conv] = {"uuid": str, "dt": _dt_text, "date": date.isoformat}
_ENC_CONV |= {"enum": lambda v: v.value if isinstance(v, Enum) else v, "dec": str}
_ENC_CONV |= {"time": _time_text, "td": _td_micros}
_DEC_CONV: dict[str, _Conv | None] = {"bytes": _LEAVES["bin"].dec, "td": _LEAVES["dur"].dec}
_DEC_CONV |= {"json": _loads}


def _compile(lines: list[str], ns: dict[str, Any], arg: str, what: str) -> _Fn:
    body = "".join(f"        {line}\n" for line in lines)
    src = f"def fn({arg}):\n    try:\n{body}    except _ERRORS as exc:\n        _fail(_what, exc)\n"
    ns |= {"_fail": _fail, "_what": what, "_ERRORS": _ERRORS, "_LO": _LO, "_HI": _HI, "_oor": _oor}
    exec(src, ns)  # names reach the source only as repr() literals, values only through ns
    fn: _Fn = ns["fn"]
    return fn


def _bind(ns: dict[str, Any], i: int, conv: _Conv | None) -> str | None:
    if conv is not None:
        ns[f"c{i}"] = conv
    return None if conv is None else f"c{i}"


def _guard(var: str, conv: str | None) -> str:
    return var if conv is None else f"(None if {var} is None else {conv}({var}))"


def _enc_item(i: int, src: str, conv: str | None, check_int: bool, col: str) -> str:
    v = f"v{i}"
    if check_int:
        return f"({v} if ({v} := {src}) is None or _LO <= {v} <= _HI else _oor({col!r}, {v}))"
    return src if conv is None else f"(None if ({v} := {src}) is None else {conv}({v}))"


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _unpack(n: int) -> str:
    return "[" + ", ".join(f"v{i}" for i in range(n)) + "] = values"


def _model_encoder(what: str, names: Sequence[str], slots: list[_Slot]) -> _Fn:
    ns: dict[str, Any] = {}
    items = ["None"] * len(names)
    for s in slots:
        conv = _bind(ns, s.col, s.dump if s.tag == "json" else _ENC_CONV.get(s.tag))
        items[s.col] = _enc_item(s.col, f"d[{s.attr!r}]", conv, s.tag == "int", names[s.col])
    return _compile(["d = obj.__dict__", f"return {_tuple(items)}"], ns, "obj", what)


def _trusted(model: type[BaseModel], slots: list[_Slot]) -> bool:
    d = model.__pydantic_decorators__
    hooks = d.validators or d.field_validators or d.root_validators or d.model_validators
    return bool(
        slots
        and all(s.plain for s in slots)
        and not hooks
        and not model.__private_attributes__
        and model.__pydantic_post_init__ is None
        and not getattr(model, "__pydantic_root_model__", False)
        and model.model_config.get("extra") != "allow"
    )


def _model_decoder(what: str, model: type[BaseModel], n: int, slots: list[_Slot]) -> _Fn:
    ns: dict[str, Any] = {"_validate": model.model_validate}
    items, lines = [], []
    for s in slots:
        value = _guard(f"v{s.col}", _bind(ns, s.col, _DEC_CONV.get(s.tag)))
        if s.optional and not s.nullable:  # NULL: not stored (older event), let the default apply
            lines.append(f"if v{s.col} is not None: kw[{s.key!r}] = {value}")
        else:
            items.append(f"{s.key!r}: {value}")
    # strict=False: stored text and ints must parse even for strict models
    lines = [_unpack(n), "kw = {" + ", ".join(items) + "}", *lines]
    slow = _compile([*lines, "return _validate(kw, strict=False)"], ns, "values", what)
    if not _trusted(model, slots):
        return slow
    ns = {"_new": object.__new__, "_set": object.__setattr__, "_cls": model, "_slow": slow}
    ns["_names"] = frozenset(model.model_fields)
    fast = {"bool": "(True if {v} else False)", "float": "float({v})"}  # SQLite: bools as 0/1
    attrs = [
        f"{s.attr!r}: "
        + (f"(None if {v} is None else {fast[s.tag].format(v=v)})" if s.tag in fast else v)
        for s in slots
        for v in [f"v{s.col}"]
    ]
    nulls = " or ".join(f"v{s.col} is None" for s in slots if not s.nullable) or "False"
    lines = [_unpack(n), f"if {nulls}: return _slow(values)", "o = _new(_cls)"]
    lines += ["_set(o, '__dict__', {" + ", ".join(attrs) + "})"]
    lines += ["_set(o, '__pydantic_fields_set__', set(_names))"]
    lines += ["_set(o, '__pydantic_extra__', None)", "_set(o, '__pydantic_private__', None)"]
    return _compile([*lines, "return o"], ns, "values", what)


def _row_codecs(
    what: str, columns: Sequence[Column], codecs: Sequence[_ColCodec]
) -> tuple[_Fn, _Fn]:
    names = [c.name for c in columns]

    def unknown(d: Mapping[str, Any]) -> NoReturn:
        raise SchemaMismatchError(f"{what}: unknown column(s) {sorted(set(d) - set(names))}")

    def missing(row: tuple[Any, ...]) -> NoReturn:
        bad = [c.name for c, v in zip(columns, row, strict=True) if v is None and not c.nullable]
        raise SchemaMismatchError(f"{what}: NOT NULL column(s) {bad} missing or None")

    ns: dict[str, Any] = {"_known": frozenset(names), "_unknown": unknown, "_missing": missing}
    pairs = list(enumerate(zip(columns, codecs, strict=True)))
    items = [
        _enc_item(
            i,
            f"d.get({c.name!r})",
            _bind(ns, i, cc.enc),
            c.sql_kind == "int" and not cc.enc,
            c.name,
        )
        for i, (c, cc) in pairs
    ]
    nulls = " or ".join(f"row[{i}] is None" for i, c in enumerate(columns) if not c.nullable)
    lines = ["if not _known.issuperset(d): _unknown(d)", f"row = {_tuple(items)}"]
    lines += [f"if {nulls or 'False'}: _missing(row)", "return row"]
    encode = _compile(lines, ns, "d", what)
    ns = {}
    fields = [f"{c.name!r}: {_guard(f'v{i}', _bind(ns, i, cc.dec))}" for i, (c, cc) in pairs]
    lines = [_unpack(len(columns)), "return {" + ", ".join(fields) + "}"]
    return encode, _compile(lines, ns, "values", what)


def _plain(info: FieldInfo) -> bool:
    ann = info.annotation
    if typing.get_origin(ann) in (Union, types.UnionType):
        rest = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = rest[0] if len(rest) == 1 else None
    return not info.metadata and ann in (str, int, float, bool)


def _slot(model: type[BaseModel], col: int, name: str, info: FieldInfo, tag: str, n: bool) -> _Slot:
    va = info.validation_alias
    key = va if isinstance(va, str) and model.model_config.get("validate_by_alias", True) else name
    dump = None
    if tag == "json":
        ann: Any = info.annotation
        if info.metadata:  # keep Annotated serialisers for the JSON dump
            ann = typing.cast(Any, Annotated)[(ann, *info.metadata)]
        adapter: TypeAdapter[Any] = TypeAdapter(ann)
        dump = partial(_dump_json, adapter)
    return _Slot(col, name, key, tag, n, not info.is_required(), _plain(info), dump)


def _dump_json(adapter: TypeAdapter[Any], value: Any) -> str:
    return adapter.dump_json(value, by_alias=True).decode()


_Plan = tuple[str, type[BaseModel], list[_Slot]]


def _plan(
    topic: str, models: Sequence[tuple[str, type[BaseModel]]], union: bool
) -> tuple[list[Column], list[_Plan]]:
    columns: dict[str, Column] = {}
    owner: dict[str, str] = {}
    found = []
    for etype, model in models:
        _complete(model)
        aliases = [a for i in model.model_fields.values() for a in (i.alias, i.serialization_alias)]
        check_field_names(model.__name__, [*model.model_fields, *filter(None, aliases)])
        fields = []
        for fname, info in model.model_fields.items():
            where = f"{model.__name__}.{fname}"
            t, n, md, tag = _map_ann(info.annotation, info.metadata, where, None, ())
            col = Column(
                fname, t, _arrow_kind(t, md[_ENC].encode() if md else None, where), union or n
            )
            prev = columns.setdefault(fname, col)
            owner.setdefault(fname, model.__name__)
            if (_type_text(prev.arrow_type), prev.sql_kind) != (_type_text(t), col.sql_kind):
                raise SpecError(
                    f"topic {topic!r}: field {fname!r} is {prev.arrow_type} ({prev.sql_kind}) "
                    f"in {owner[fname]} but {t} ({col.sql_kind}) in {model.__name__}"
                )
            fields.append((fname, info, tag, n))
        found.append((etype, model, fields))
    index = {name: i for i, name in enumerate(columns)}
    plans = [
        (etype, model, [_slot(model, index[f], f, info, tag, n) for f, info, tag, n in fields])
        for etype, model, fields in found
    ]
    return list(columns.values()), plans


class TopicSchema:
    """A topic's typed schema (SQL columns and Arrow schema) with precompiled codecs.

    Build it with ``from_events`` (an aggregate's event union), ``from_model`` (one model)
    or ``from_arrow`` (a schema-only topic whose events are plain row dicts).

    Example::

        topic = TopicSchema.from_arrow("cdc", pa.schema([pa.field("op", pa.string(), False)]))
        fields = topic.encoder("")({"op": "c"})  # SQL values of the field columns
    """

    name: str
    columns: tuple[Column, ...]
    event_types: Mapping[str, type[BaseModel]]

    def __init__(self, name: str, columns: Sequence[Column], plans: Sequence[_Plan] | None) -> None:
        """Prefer the ``from_*`` constructors; ``plans=None`` makes a row-dict topic."""
        if not isinstance(name, str) or not name:
            raise SpecError("a topic needs a non-empty name")
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise SpecError(f"topic {name!r}: duplicate column names in {names}")
        self.name, self.columns, what = name, tuple(columns), f"topic {name!r}"
        fields = [
            pa.field(
                c.name,
                c.arrow_type,
                c.nullable,
                {_ENC: "json"} if c.sql_kind == "json" and _is_str(c.arrow_type) else None,
            )
            for c in self.columns
        ]
        self._schema = pa.schema([*META_FIELDS, *fields])
        kinds = (*META_SQL_KINDS, *(c.sql_kind for c in self.columns))
        self._codecs = tuple(
            _col_codec(f.type, k) for f, k in zip(self._schema, kinds, strict=True)
        )
        canonical = [
            [c.name, _type_text(c.arrow_type), c.sql_kind, c.nullable] for c in self.columns
        ]
        self._fingerprint = hashlib.sha256(
            _dumps(["codec/1", name, canonical]).encode()
        ).hexdigest()
        self._models = {
            etype: (
                _model_encoder(f"{what} {etype}", names, slots),
                _model_decoder(f"{what} {etype}", model, len(names), slots),
            )
            for etype, model, slots in plans or ()
        }
        fc = self._codecs[len(META_FIELDS) :]
        self._rows = _row_codecs(what, self.columns, fc) if plans is None else None
        self.event_types = types.MappingProxyType({t: m for t, m, _ in plans or ()})

    @classmethod
    def from_events(cls, name: str, events: Sequence[type[Event]]) -> TopicSchema:
        """Topic of an event union: one column per field name, all nullable.

        Events are ordered by ``event_type``, fields by declaration; a field name shared by
        several events shares one column if the types agree, else ``SpecError``.
        """
        members = sorted(
            union_members(tuple(events), f"topic {name!r}"), key=lambda e: e.event_type
        )
        return cls(name, *_plan(name, [(e.event_type, e) for e in members], union=True))

    @classmethod
    def from_model(cls, name: str, model: type[BaseModel]) -> TopicSchema:
        """Topic of one model (event type ``model.__name__``), nullability as annotated."""
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise SpecError(f"topic {name!r}: {model!r} is not a pydantic model")
        return cls(name, *_plan(name, [(model.__name__, model)], union=False))

    @classmethod
    def from_arrow(cls, name: str, schema: pa.Schema) -> TopicSchema:
        """Schema-only topic: columns, types and nullability from ``schema``; rows are dicts."""
        check_field_names(f"topic {name!r}", schema.names)
        kind = partial(_arrow_kind, where=f"topic {name!r}")
        return cls(
            name, [Column(f.name, f.type, kind(f.type, _enc(f)), f.nullable) for f in schema], None
        )

    @property
    def arrow_schema(self) -> pa.Schema:
        """``META_FIELDS`` followed by the field columns (deterministic, no unions)."""
        return self._schema

    @property
    def fingerprint(self) -> str:
        """sha256 hex of a canonical text of the name and columns, stable across runs."""
        return self._fingerprint

    def _model(self, event_type: str) -> tuple[_Fn, _Fn]:
        pair = self._models.get(event_type)
        if pair is None:
            raise UnknownEventTypeError(f"topic {self.name!r} has no event type {event_type!r}")
        return pair

    def encoder(self, event_type: str) -> Callable[[Any], tuple[Any, ...]]:
        """Precompiled ``event -> SQL values of all field columns`` (None where not a field).

        For row-dict topics ``event_type`` is ignored and the function takes a dict.
        """
        return self._rows[0] if self._rows is not None else self._model(event_type)[0]

    def decode(self, event_type: str, values: Sequence[Any]) -> Any:
        """SQL values of the field columns -> model instance (row-dict topics: a dict)."""
        return (self._rows[1] if self._rows is not None else self._model(event_type)[1])(values)

    def to_arrow(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        """Full SQL rows (META values, ``_produced_at`` in epoch micros, then fields) -> batch."""
        what, width = f"topic {self.name!r}", len(self._codecs)
        try:
            cols = list(zip(*rows, strict=True)) if rows else [()] * width
        except ValueError as exc:
            raise SchemaMismatchError(f"{what}: rows differ in length") from exc
        if len(cols) != width:
            raise SchemaMismatchError(f"{what}: rows have {len(cols)} values, expected {width}")
        arrays = []
        for f, codec, values in zip(self._schema, self._codecs, cols, strict=True):
            try:
                arrays.append(codec.to_arrow(values))
            except _ARROW_ERRORS as exc:
                raise SchemaMismatchError(f"{what}: column {f.name!r}: {exc}") from exc
            if not f.nullable and arrays[-1].null_count:
                raise SchemaMismatchError(f"{what}: NOT NULL column {f.name!r} has nulls")
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)

    def from_arrow_rows(
        self, data: pa.RecordBatch | pa.Table, *, with_meta: bool
    ) -> list[tuple[Any, ...]]:
        """Inverse of ``to_arrow``: SQL tuples (full rows, or field values only).

        Missing nullable columns become None; a missing NOT NULL column, an unknown column,
        a type that does not cast safely (within its family: no text to numbers) or a null
        in a NOT NULL column raise ``SchemaMismatchError`` naming the column.
        """
        skip = 0 if with_meta else len(META_FIELDS)
        fields, codecs, what = (
            list(self._schema)[skip:],
            self._codecs[skip:],
            f"topic {self.name!r}",
        )
        present = list(data.schema.names)
        extra = [n for n in present if present.count(n) > 1 or n not in {f.name for f in fields}]
        if extra:
            raise SchemaMismatchError(f"{what}: unknown or repeated column(s) {extra}")
        cols: list[list[Any]] = []
        for f, codec in zip(fields, codecs, strict=True):
            where = f"{what}: column {f.name!r}"
            if f.name not in present and not f.nullable:
                raise SchemaMismatchError(f"{where} is NOT NULL but missing")
            if f.name not in present:
                cols.append([None] * data.num_rows)
                continue
            arr = data.column(f.name)
            arr = arr if arr.type.equals(f.type) else _cast_safely(arr, f.type, where)
            if not f.nullable and arr.null_count:
                raise SchemaMismatchError(f"{where} is NOT NULL but holds {arr.null_count} null(s)")
            try:
                cols.append(codec.from_arrow(arr))
            except _ARROW_ERRORS as exc:
                raise SchemaMismatchError(f"{where}: {exc}") from exc
        return list(zip(*cols, strict=True)) if cols else [()] * data.num_rows
