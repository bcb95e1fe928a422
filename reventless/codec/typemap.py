"""Annotations -> Arrow types: what each pydantic field annotation is stored as.

``_map_ann`` returns the Arrow type, nullability, field metadata and the conversion tag
that ``codegen`` uses to pick the per-value conversion of a field.
"""

from __future__ import annotations

import collections.abc as abc
import types
import typing
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Annotated, Any, Literal, Union
from uuid import UUID

import pyarrow as pa
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ..errors import SpecError
from .columns import _ENC, _TS, _US

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
