"""SQL values <-> Arrow arrays, per column: type families, SQL kinds and JSON columns.

``_col_codec`` gives each column its bulk conversions (SQL values <-> Arrow array) and its
per-value ones for row-dict topics; ``_arrow_kind`` decides and validates the SQL kind of an
Arrow type; ``_type_text`` is the canonical type text behind fingerprints and type checks.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import TypeAdapter

from ..errors import SchemaMismatchError, SpecError
from .columns import (
    _ENC,
    _TS,
    _US,
    SqlKind,
    _Conv,
    _dt_text,
    _dumps,
    _loads,
    _td_micros,
    _time_text,
)

_TD: TypeAdapter[timedelta] = TypeAdapter(timedelta)
_ARROW_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError)

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


def _cast(a: Any, t: Any) -> Any:
    return a.cast(t)


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
    #: (stored column as Arrow, type) -> array without Python values (an Arrow-native read);
    #: None: through ``to_arrow`` of the column's values
    native: Callable[[Any, Any], Any] | None = None


def _ts_text(a: Any) -> list[Any]:
    # 5x faster than pc.strftime: a naive "us" timestamp casts to "YYYY-MM-DD HH:MM:SS.ffffff"
    text = a.cast(_TS).cast(pa.timestamp("us")).cast(pa.string())
    text = pc.replace_substring(text, " ", "T", max_replacements=1)
    return _pylist(pc.binary_join_element_wise(text, "+00:00", ""))


_LEAVES: dict[str, _Leaf] = {
    "int": _Leaf(pa.types.is_integer, "int", native=_cast),
    "float": _Leaf(pa.types.is_floating, "float", native=_cast),
    "bool": _Leaf(pa.types.is_boolean, "bool", lambda vs, t: _bools(vs), dec=bool, native=_cast),
    "str": _Leaf(_is_str, "text", native=_cast),
    "bin": _Leaf(_is_bin, "blob", dec=lambda v: v if type(v) is bytes else bytes(v), native=_cast),
    "ts": _Leaf(
        pa.types.is_timestamp,
        "text",
        lambda vs, t: _recast(pa.array(vs, pa.string()).cast(_TS), t),
        _ts_text,
        _dt_text,
        datetime.fromisoformat,
        (datetime.fromisoformat, _dt_text),
        lambda a, t: _recast(a.cast(pa.string()).cast(_TS), t),
    ),
    "date": _Leaf(
        pa.types.is_date,
        "text",
        lambda vs, t: _recast(pa.array(vs, pa.string()).cast(pa.date32()), t),
        lambda a: _pylist(a.cast(pa.date32()).cast(pa.string())),
        date.isoformat,
        date.fromisoformat,
        (date.fromisoformat, date.isoformat),
        lambda a, t: _recast(a.cast(pa.string()).cast(pa.date32()), t),
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
        lambda a, t: a.cast(pa.string()).cast(t),
    ),
    "dur": _Leaf(
        pa.types.is_duration,
        "int",
        lambda vs, t: _recast(pa.array(vs, _US), t),
        lambda a: _pylist(a.cast(_US).cast(pa.int64())),
        _td_micros,
        lambda n: timedelta(microseconds=n),
        (_TD.validate_python, lambda v: _TD.dump_python(v, mode="json")),
        lambda a, t: _recast(a.cast(pa.int64()).cast(_US), t),
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
    #: The stored column as Arrow (an ADBC read: whatever type the driver gave it) -> the
    #: topic's array, the same as ``to_arrow`` of its values
    from_storage: Callable[[Any], Any]


#: Arrow types a driver may give a column of each SQL kind (SQLite: by the values' storage
#: classes; booleans as integers, a column of only NULLs as int64).
_STORED: dict[str, Callable[[Any], bool]] = {
    "int": lambda t: pa.types.is_integer(t) or pa.types.is_boolean(t),
    "bool": lambda t: pa.types.is_integer(t) or pa.types.is_boolean(t),
    "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "text": _is_str,
    "json": _is_str,
    "blob": _is_bin,
}


def _from_storage(
    t: Any, kind: SqlKind, to_arrow: Callable[[Sequence[Any]], Any], native: _Conv | None
) -> Callable[[Any], Any]:
    """``_ColCodec.from_storage``: Arrow casts where the stored type is the kind's own and
    ``native`` says how, else ``to_arrow`` of the Python values."""
    stored = _STORED[kind]

    def convert(a: Any) -> Any:
        if a.null_count == len(a):
            return pa.nulls(len(a), t)
        if native is not None and stored(a.type):
            try:
                return native(a)
            except _ARROW_ERRORS:
                pass  # the values' own conversion says what is wrong with them, if anything
        return to_arrow(a.to_pylist())

    return convert


def _col_codec(t: Any, kind: SqlKind) -> _ColCodec:
    if kind == "json" and _is_str(t):  # Any / unions: the Arrow column holds the JSON text
        as_text = partial(pa.array, type=t)
        text = _from_storage(t, kind, as_text, partial(_cast, t=t))
        return _ColCodec(as_text, _pylist, _dumps, _loads, text)
    if kind == "json":
        p, j = _json_conv(t, None)
        load: _Conv = _loads if p is None else (lambda s: p(_loads(s)))
        dump: _Conv = _dumps if j is None else (lambda v: _dumps(j(v)))
        # maps_as_pydicts makes to_pylist ~30x slower: only ask for it when there is a map
        dicts = "strict" if "map<" in _type_text(t) else None

        def loads(vs: Sequence[Any]) -> Any:
            return pa.array([None if v is None else load(v) for v in vs], t)

        return _ColCodec(
            loads,
            lambda a: [None if v is None else dump(v) for v in a.to_pylist(maps_as_pydicts=dicts)],
            dump,
            load,
            _from_storage(t, kind, loads, None),
        )
    if pa.types.is_timestamp(t) and kind == "int":  # _produced_at: epoch microseconds

        def micros(vs: Sequence[Any]) -> Any:
            return _recast(pa.array(vs, _TS), t)

        return _ColCodec(
            micros,
            lambda a: a.cast(_TS).cast(pa.int64()).to_pylist(),
            None,
            None,
            _from_storage(t, kind, micros, lambda a: _recast(a.cast(pa.int64()).cast(_TS), t)),
        )
    leaf = _LEAVES[_family(t)]

    def values(vs: Sequence[Any]) -> Any:
        return leaf.to_arrow(vs, t)

    native = leaf.native
    return _ColCodec(
        values,
        leaf.from_arrow,
        leaf.enc,
        leaf.dec,
        _from_storage(t, kind, values, None if native is None else lambda a: native(a, t)),
    )


def _fits(src: Any, dst: Any) -> bool:
    """Whether values of type ``src`` go into a column of type ``dst`` as the same kind of
    value: the same family (nested types child by child, struct fields by name and the same
    names), an int into a float, a float into one at least as wide, dictionary-encoded
    values by their value type. Arrow's cast would also parse text into numbers, add or drop
    struct fields and round floats silently; none of that is a match."""
    T = pa.types
    if T.is_dictionary(src):
        src = src.value_type
    if T.is_null(src) or src.equals(dst):
        return True
    if T.is_struct(dst):
        if not T.is_struct(src):
            return False
        have, want = ({f.name: f.type for f in _fields(t)} for t in (src, dst))
        same = len(have) == src.num_fields and have.keys() == want.keys()
        return same and all(_fits(have[n], want[n]) for n in want)
    if T.is_map(dst):
        return bool(
            T.is_map(src)
            and _fits(src.key_type, dst.key_type)
            and _fits(src.item_type, dst.item_type)
        )
    if _is_list(dst):
        return _is_list(src) and _fits(src.value_type, dst.value_type)
    have_f, want_f = _family(src), _family(dst)
    if want_f == "float":
        return have_f == "int" or (have_f == "float" and src.bit_width <= dst.bit_width)
    return have_f == want_f and have_f in _LEAVES


def _cast_safely(arr: Any, target: Any, where: str) -> Any:
    """``arr`` cast to ``target`` when its type ``_fits``, every value checked by Arrow (an
    int64 into int32, nanoseconds into microseconds, a wider decimal: only if nothing is lost)."""
    if not _fits(arr.type, target):
        raise SchemaMismatchError(f"{where}: has type {arr.type}, expected {target}")
    try:
        return arr.cast(target, safe=True)
    except _ARROW_ERRORS as exc:
        raise SchemaMismatchError(f"{where}: cannot cast {arr.type} to {target}: {exc}") from exc


def _nested_null(arr: Any, t: Any) -> str | None:
    """The first NOT NULL nested field (list item, map value, struct field) of ``arr`` that
    holds a null, as a path (``.element``); None when there is none. Arrow keeps these
    nulls (a list's item nullability is not checked), the row's decoder would not."""
    if isinstance(arr, pa.ChunkedArray):
        return next(filter(None, (_nested_null(c, t) for c in arr.chunks)), None)
    T = pa.types
    kids: list[tuple[Any, Any, int]] = []  # (field, values, nulls allowed by the parent)
    if T.is_map(t):
        kids = [(t.key_field, arr.keys, 0), (t.item_field, arr.items, 0)]
    elif _is_list(t):
        kids = [(t.value_field, arr.flatten(), 0)]
    elif T.is_struct(t):  # flatten() masks a null struct's fields: those nulls are fine
        kids = [(f, a, arr.null_count) for f, a in zip(_fields(t), arr.flatten(), strict=True)]
    for f, values, allowed in kids:
        if not f.nullable and values.null_count > allowed:
            return f".{f.name}"
        deeper = _nested_null(values, f.type)
        if deeper is not None:
            return f".{f.name}{deeper}"
    return None
