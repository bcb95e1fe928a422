"""Per-event codecs: generated code, since this is the per-event hot path.

Compiles, per event type, ``model -> SQL values`` and ``SQL values -> model`` functions
(with an unvalidated fast path for plain, hook-free models), and for row-dict topics
``dict -> SQL values`` and back.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from enum import Enum
from functools import partial
from typing import Annotated, Any, NoReturn, TypeVar, Union

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from ..errors import SchemaMismatchError
from ..personal import ERASED, Personal
from ..tags import Tag
from .arrow import _LEAVES, _ColCodec
from .columns import (
    _HI,
    _LO,
    Column,
    Plaintext,
    _Conv,
    _dt_text,
    _loads,
    _td_micros,
    _time_text,
)

_Fn = Callable[..., Any]
M = TypeVar("M", bound=BaseModel)
_ERRORS = (KeyError, AttributeError, TypeError, ValueError, OverflowError)


def _oor(column: str, v: int) -> NoReturn:
    raise SchemaMismatchError(f"column {column!r}: integer {v} does not fit in int64")


def _fail(what: str, exc: BaseException) -> NoReturn:
    raise SchemaMismatchError(f"{what}: {exc}") from exc


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


def _opened(v: Any) -> Any:
    """A personal field's value from what its column gave: opened JSON text, else
    ``ERASED`` (sealed text no keyring opened: the subject is forgotten)."""
    return _loads(v.text) if type(v) is Plaintext else ERASED


_DEC_CONV["sealed"] = _opened


def _sealing(dump: _Conv | None) -> _Conv:
    assert dump is not None

    def seal(v: Any) -> Plaintext:
        return Plaintext(dump(v))

    return seal


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
        conv = _bind(
            ns,
            s.col,
            s.dump
            if s.tag == "json"
            else _sealing(s.dump)
            if s.tag == "sealed"
            else _ENC_CONV.get(s.tag),
        )
        items[s.col] = _enc_item(s.col, f"d[{s.attr!r}]", conv, s.tag == "int", names[s.col])
    return _compile(["d = obj.__dict__", f"return {_tuple(items)}"], ns, "obj", what)


def _hookless(model: type[BaseModel]) -> bool:
    """Whether validating ``model`` only sets its fields' values: no validators, private
    attributes, post-init hook or extra values, not a root model, and the instance
    layout (``_MODEL_SLOTS``) of a pydantic we know."""
    return (
        not has_validators(model)
        and not model.__private_attributes__
        and model.__pydantic_post_init__ is None
        and not getattr(model, "__pydantic_root_model__", False)
        and model.model_config.get("extra") != "allow"
        and tuple(BaseModel.__slots__) == _MODEL_SLOTS
    )


def _trusted(model: type[BaseModel], slots: list[_Slot]) -> bool:
    return bool(slots and all(s.plain for s in slots) and _hookless(model))


#: The instance slots of a pydantic model, as ``_model_decoder`` sets them (in order).
_MODEL_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")


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
    # BaseModel's slots set through their own descriptors (half the time of
    # object.__setattr__, which looks each name up first)
    ns = {f"_set{i}": BaseModel.__dict__[n].__set__ for i, n in enumerate(_MODEL_SLOTS)}
    ns |= {"_new": object.__new__, "_cls": model, "_slow": slow}
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
    lines += ["_set0(o, {" + ", ".join(attrs) + "})", "_set1(o, set(_names))"]
    lines += ["_set2(o, None)", "_set3(o, None)"]
    return _compile([*lines, "return o"], ns, "values", what)


#: Defaults a fresh state may share between its instances: pydantic copies a default
#: only when it is mutable.
_ATOMIC = (type(None), bool, int, float, str, bytes)


def fresh_state(model: type[M], key: str = "id") -> Callable[[str], M]:
    """``model(**{key: value})``, what an aggregate with no events starts from: built
    without validation when that is exactly what validation would build (``key`` a plain
    ``str`` field, every other field an immutable default, no validators, hooks, private
    attributes, aliases or ``__init__`` of its own), else by validation. A ``value``
    that is not a ``str`` always goes through validation (and its error). Ad hoc: 1.0
    against 2.3 us per state."""

    def validated(value: str) -> M:
        return model(**{key: value})

    fields = model.model_fields
    info = fields.get(key)
    config = model.model_config
    if (
        info is None
        or info.alias is not None
        or plain_type(info) != (str, False)
        or config.get("alias_generator") is not None
        or config.get("validate_default")
        or not _hookless(model)
        or model.__init__ is not BaseModel.__init__
        or model.__new__ is not object.__new__
    ):
        return validated
    defaults: dict[str, Any] = {}
    for name, f in fields.items():
        if name != key and (
            f.is_required()
            or f.default_factory is not None
            or f.validate_default
            or type(f.default) not in _ATOMIC
        ):
            return validated
        defaults[name] = None if name == key else f.default  # (the field order kept)
    new = object.__new__
    set_dict, set_fields, set_extra, set_private = (
        BaseModel.__dict__[n].__set__ for n in _MODEL_SLOTS
    )

    def fresh(value: str) -> M:
        if type(value) is not str:
            return validated(value)
        obj: M = new(model)
        state = dict(defaults)
        state[key] = value
        set_dict(obj, state)
        set_fields(obj, {key})
        set_extra(obj, None)
        set_private(obj, None)
        return obj

    return fresh


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


def plain_type(info: FieldInfo) -> tuple[type, bool] | None:
    """(type, admits None) of a field that is exactly ``str``/``int``/``float``/``bool``
    (optional or not) and unconstrained, else None: such values are safe to set unvalidated."""
    ann: Any = info.annotation
    nullable = False
    if typing.get_origin(ann) in (Union, types.UnionType):
        rest = [a for a in typing.get_args(ann) if a is not type(None)]
        nullable = len(rest) < len(typing.get_args(ann))
        ann = rest[0] if len(rest) == 1 else None
    # a Tag marker names the field's tag and constrains nothing
    if any(not isinstance(m, Tag) for m in info.metadata) or ann not in (str, int, float, bool):
        return None
    return ann, nullable


def has_validators(model: type[BaseModel]) -> bool:
    """Whether ``model`` declares validators (decoding through it may change values)."""
    d = model.__pydantic_decorators__
    return bool(d.validators or d.field_validators or d.root_validators or d.model_validators)


def _slot(model: type[BaseModel], col: int, name: str, info: FieldInfo, tag: str, n: bool) -> _Slot:
    va = info.validation_alias
    key = va if isinstance(va, str) and model.model_config.get("validate_by_alias", True) else name
    dump = None
    if tag in ("json", "sealed"):
        ann: Any = info.annotation
        meta = [m for m in info.metadata if not isinstance(m, Personal)]
        if meta:  # keep Annotated serialisers for the JSON dump
            ann = typing.cast(Any, Annotated)[(ann, *meta)]
        adapter: TypeAdapter[Any] = TypeAdapter(ann)
        dump = partial(_dump_json, adapter)
    return _Slot(col, name, key, tag, n, not info.is_required(), plain_type(info) is not None, dump)


def _dump_json(adapter: TypeAdapter[Any], value: Any) -> str:
    return adapter.dump_json(value, by_alias=True).decode()


_Plan = tuple[str, type[BaseModel], list[_Slot]]
