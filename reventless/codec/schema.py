"""``TopicSchema``: a topic's columns and Arrow schema, built from models or Arrow.

Plans the columns of an event union (one column per field name, types must agree), then
wires the column codecs (``arrow``) and generated per-event codecs (``codegen``) together.
"""

from __future__ import annotations

import hashlib
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Union

import pyarrow as pa
from pydantic import BaseModel

from ..errors import SchemaMismatchError, SpecError, UnknownEventTypeError
from ..personal import ERASED, personal_fields
from ..spec import Event, check_field_names, union_members
from ..tags import event_tags, tag_fields
from .arrow import (
    _ARROW_ERRORS,
    _arrow_kind,
    _cast_safely,
    _col_codec,
    _ColCodec,
    _enc,
    _is_str,
    _nested_null,
    _type_text,
)
from .codegen import _Fn, _model_decoder, _model_encoder, _Plan, _row_codecs, _slot
from .columns import (
    _ENC,
    AGGREGATE_AT,
    FIELDS_AT,
    META_FIELDS,
    META_SQL_KINDS,
    PERSONAL_KEY,
    Column,
    Plaintext,
    _dumps,
)
from .typemap import _complete, _map_ann


def _plan(
    topic: str, models: Sequence[tuple[str, type[BaseModel]]], union: bool, personal: bool = True
) -> tuple[list[Column], list[_Plan]]:
    columns: dict[str, Column] = {}
    owner: dict[str, str] = {}
    found = []
    for etype, model in models:
        _complete(model)
        aliases = [a for i in model.model_fields.values() for a in (i.alias, i.serialization_alias)]
        check_field_names(model.__name__, [*model.model_fields, *filter(None, aliases)])
        fields = []
        sealed = dict(personal_fields(model)) if personal else {}
        for fname, info in model.model_fields.items():
            where = f"{model.__name__}.{fname}"
            if fname in sealed:  # sealed text, whatever the value's type
                t, n, tag = pa.string(), _admits_none(info.annotation), "sealed"
                col = Column(fname, t, "text", True, sealed[fname] or "")
            else:
                t, n, md, tag = _map_ann(info.annotation, info.metadata, where, None, ())
                col = Column(
                    fname, t, _arrow_kind(t, md[_ENC].encode() if md else None, where), union or n
                )
            prev = columns.setdefault(fname, col)
            owner.setdefault(fname, model.__name__)
            if (_type_text(prev.arrow_type), prev.sql_kind, prev.personal) != (
                _type_text(t),
                col.sql_kind,
                col.personal,
            ):
                raise SpecError(
                    f"topic {topic!r}: field {fname!r} is {_col_text(prev)} in {owner[fname]} "
                    f"but {_col_text(col)} in {model.__name__}"
                )
            fields.append((fname, info, tag, n))
        found.append((etype, model, fields))
    index = {name: i for i, name in enumerate(columns)}
    plans = [
        (etype, model, [_slot(model, index[f], f, info, tag, n) for f, info, tag, n in fields])
        for etype, model, fields in found
    ]
    return list(columns.values()), plans


def _admits_none(annotation: Any) -> bool:
    return annotation is Any or (
        typing.get_origin(annotation) in (Union, types.UnionType)
        and type(None) in typing.get_args(annotation)
    )


def _col_text(c: Column) -> str:
    subject = "" if c.personal is None else f", personal data of {c.personal or 'the aggregate'}"
    return f"{c.arrow_type} ({c.sql_kind}{subject})"


def _erasing(decode: _Fn, slots: Sequence[tuple[int, str]]) -> _Fn:
    """``decode`` that leaves ``ERASED`` in each personal field whose value was not opened
    (its subject forgotten, or no keyring at hand): validation would make it a plain str."""

    def erasing(values: Sequence[Any]) -> Any:
        obj = decode(values)
        for i, attr in slots:
            v = values[i]
            if v is not None and type(v) is not Plaintext:
                obj.__dict__[attr] = ERASED
        return obj

    return erasing


#: The column of an event's tags (topics whose events declare tags, and DCB logs): a JSON
#: list of strings in SQL, ``list<string>`` in Arrow, after the field columns.
TAGS_COLUMN = "_tags"
TAGS_TYPE = pa.list_(pa.field("element", pa.string(), False))


def _tags_column() -> Column:
    return Column(TAGS_COLUMN, TAGS_TYPE, "json", False)


def add_tags(stored: str, extra: Sequence[str]) -> str:
    """A tags column's SQL value (a JSON list) with ``extra`` added after its own tags,
    each tag once.

    Example::

        add_tags('["course:c1"]', ["term:2026", "course:c1"])  # '["course:c1","term:2026"]'
    """
    if not extra:
        return stored
    return _dumps(list(dict.fromkeys([*json.loads(stored), *extra])))


def _tagging(encode: _Fn, model: type[BaseModel]) -> _Fn:
    """``encode`` with the tags column (its last value) filled from the ``Tag`` fields."""
    if not tag_fields(model):

        def untagged(obj: Any) -> tuple[Any, ...]:
            return (*encode(obj)[:-1], "[]")

        return untagged

    def tagged(obj: Any) -> tuple[Any, ...]:
        return (*encode(obj)[:-1], _dumps(event_tags(obj)))

    return tagged


def _personal_of(f: pa.Field) -> str | None:
    value = (f.metadata or {}).get(PERSONAL_KEY.encode())
    return None if value is None else bytes(value).decode()


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
    versions: Mapping[str, int]

    def __init__(self, name: str, columns: Sequence[Column], plans: Sequence[_Plan] | None) -> None:
        """Prefer the ``from_*`` constructors; ``plans=None`` makes a row-dict topic."""
        if not isinstance(name, str) or not name:
            raise SpecError("a topic needs a non-empty name")
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise SpecError(f"topic {name!r}: duplicate column names in {names}")
        self.name, self.columns, what = name, tuple(columns), f"topic {name!r}"
        tagged = bool(columns) and columns[-1].name == TAGS_COLUMN
        if tagged and (
            columns[-1].nullable or _type_text(columns[-1].arrow_type) != _type_text(TAGS_TYPE)
        ):
            raise SpecError(f"{what}: column {TAGS_COLUMN!r} must be a NOT NULL list<string>")
        #: Where the tags column sits in a stored row (None: the topic has no tags).
        self.tags_at: int | None = FIELDS_AT + len(columns) - 1 if tagged else None
        fields = [
            pa.field(
                c.name,
                c.arrow_type,
                c.nullable,
                {_ENC: "json"}
                if c.sql_kind == "json" and _is_str(c.arrow_type)
                else None
                if c.personal is None
                else {PERSONAL_KEY: c.personal},
            )
            for c in self.columns
        ]
        #: (row index of a personal column, row index of its subject's id), in column order.
        self.personal: tuple[tuple[int, int], ...] = tuple(
            (FIELDS_AT + i, AGGREGATE_AT if not c.personal else FIELDS_AT + names.index(c.personal))
            for i, c in enumerate(self.columns)
            if c.personal is not None
        )
        self._schema = pa.schema([*META_FIELDS, *fields])
        kinds = (*META_SQL_KINDS, *(c.sql_kind for c in self.columns))
        self._codecs = tuple(
            _col_codec(f.type, k) for f, k in zip(self._schema, kinds, strict=True)
        )
        canonical = [
            [c.name, _type_text(c.arrow_type), c.sql_kind, c.nullable]
            + ([] if c.personal is None else [c.personal])
            for c in self.columns
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
        for etype, _, slots in plans or ():
            sealed = [(s.col, s.attr) for s in slots if s.tag == "sealed"]
            if sealed:
                enc, dec = self._models[etype]
                self._models[etype] = (enc, _erasing(dec, sealed))
        if tagged and plans is not None:  # the generated encoders leave the tags column None
            for etype, model, _ in plans:
                enc, dec = self._models[etype]
                self._models[etype] = (_tagging(enc, model), dec)
        fc = self._codecs[len(META_FIELDS) :]
        self._rows = _row_codecs(what, self.columns, fc) if plans is None else None
        self.event_types = types.MappingProxyType({t: m for t, m, _ in plans or ()})
        #: Current schema version of each event type (what stored rows are upcast to).
        self.versions = types.MappingProxyType(
            {t: int(getattr(m, "schema_version", 1)) for t, m, _ in plans or ()}
        )
        #: ``(event type, schema version) -> decoder of the field values`` of the current
        #: versions of a model topic (the rows that need no upcast; ``decode``'s hot path).
        self.decoders: Mapping[tuple[str, int], _Fn] = {
            (t, v): self._models[t][1] for t, v in self.versions.items()
        }

    @classmethod
    def from_events(
        cls, name: str, events: Sequence[type[Event]], *, tags: bool = False
    ) -> TopicSchema:
        """Topic of an event union: one column per field name, all nullable.

        Events are ordered by ``event_type``, fields by declaration; a field name shared by
        several events shares one column if the types agree, else ``SpecError``. If an
        event declares ``Tag`` fields, or ``tags`` is True (a DCB log), the ``_tags``
        column follows the fields; encoders fill it from the ``Tag`` fields.
        """
        members = sorted(
            union_members(tuple(events), f"topic {name!r}"), key=lambda e: e.event_type
        )
        columns, plans = _plan(name, [(e.event_type, e) for e in members], union=True)
        if tags or any(tag_fields(e) for e in members):
            columns.append(_tags_column())
        return cls(name, columns, plans)

    @classmethod
    def from_model(cls, name: str, model: type[BaseModel], *, personal: bool = True) -> TopicSchema:
        """Topic of one model (event type ``model.__name__``), nullability as annotated.
        ``personal=False`` stores ``rv.Personal`` fields as ordinary columns (read-model
        rows: their ``on_forget`` hooks erase them)."""
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise SpecError(f"topic {name!r}: {model!r} is not a pydantic model")
        return cls(name, *_plan(name, [(model.__name__, model)], False, personal))

    @classmethod
    def from_arrow(cls, name: str, schema: pa.Schema) -> TopicSchema:
        """Schema-only topic: columns, types and nullability from ``schema``; rows are dicts."""
        # a stored schema read back (catalogs, Spark) keeps its tags column
        check_field_names(f"topic {name!r}", [n for n in schema.names if n != TAGS_COLUMN])
        if TAGS_COLUMN in schema.names[:-1]:
            raise SpecError(f"topic {name!r}: {TAGS_COLUMN!r} must be the last column")
        kind = partial(_arrow_kind, where=f"topic {name!r}")
        return cls(
            name,
            [
                Column(f.name, f.type, kind(f.type, _enc(f)), f.nullable, _personal_of(f))
                for f in schema
            ],
            None,
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

    def encode_rows(self, data: object) -> list[tuple[Any, ...]]:
        """SQL values of the field columns of ``data``, checked against the schema.

        ``data`` is an Arrow table or batch (``from_arrow_rows``, exact columns), a list of
        this topic's model (instances of exactly that class), or, for a row-dict topic, a
        list of dicts with exactly the field names, converted by Arrow (no text parsed into
        numbers). Anything else raises ``SchemaMismatchError``.

        Example::

            topic.encode_rows([{"op": "c"}])  # [("c",)]
        """
        what = f"topic {self.name!r}"
        if isinstance(data, pa.Table | pa.RecordBatch):
            return self.from_arrow_rows(data, with_meta=False)
        if not isinstance(data, Sequence) or isinstance(data, str | bytes):
            raise SchemaMismatchError(
                f"{what}: expected an Arrow table or a list, got {type(data)}"
            )
        if self._rows is None:  # a model topic: instances of one of its models
            etypes = {m: t for t, m in self.event_types.items()}
            bad = next((x for x in data if type(x) not in etypes), None)
            if bad is not None:
                want = " or ".join(m.__name__ for m in etypes)
                raise SchemaMismatchError(f"{what}: expected {want}, got {type(bad)}")
            return [self._model(etypes[type(m)])[0](m) for m in data]
        names, encode = {c.name for c in self.columns}, self._rows[0]
        for x in data:
            if not isinstance(x, Mapping):
                raise SchemaMismatchError(f"{what}: expected a dict of the columns, got {type(x)}")
            if x.keys() != names:
                missing, extra = sorted(names - x.keys()), sorted(x.keys() - names)
                raise SchemaMismatchError(f"{what}: missing column(s) {missing}, unknown {extra}")
        rows = [encode(x) for x in data]
        if not rows:
            return []
        # through Arrow and back, as the relay will: a value Arrow cannot hold fails here
        fields = pa.schema(list(self._schema)[len(META_FIELDS) :])
        arrays = []
        codecs = self._codecs[len(META_FIELDS) :]
        for f, codec, values in zip(fields, codecs, zip(*rows, strict=True), strict=True):
            try:
                arrays.append(codec.to_arrow(values))
            except _ARROW_ERRORS as exc:
                raise SchemaMismatchError(f"{what}: column {f.name!r}: {exc}") from exc
        batch = pa.RecordBatch.from_arrays(arrays, schema=fields)
        return self.from_arrow_rows(batch, with_meta=False)

    def to_arrow(self, rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        """Full SQL rows (META values, ``_produced_at`` in epoch micros, then fields) -> batch."""
        what, width = f"topic {self.name!r}", len(self._codecs)
        try:
            cols = list(zip(*rows, strict=True)) if rows else [()] * width
        except ValueError as exc:
            raise SchemaMismatchError(f"{what}: rows differ in length") from exc
        if len(cols) != width:
            raise SchemaMismatchError(f"{what}: rows have {len(cols)} values, expected {width}")
        return self._assemble(cols, lambda codec, values: codec.to_arrow(values))

    def from_storage(self, stored: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
        """The stored columns read as Arrow (an ADBC driver's result, in storage order: the
        types the driver gave them) -> the same batch ``to_arrow`` makes of those rows."""
        what, width = f"topic {self.name!r}", len(self._codecs)
        if stored.num_columns != width:
            raise SchemaMismatchError(
                f"{what}: rows have {stored.num_columns} values, expected {width}"
            )
        cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in stored.columns]
        return self._assemble(cols, lambda codec, col: codec.from_storage(col))

    def projection(self, names: Sequence[str]) -> tuple[int, ...]:
        """Where the columns ``names`` sit in a stored row (what ``select_storage`` takes);
        ``SchemaMismatchError`` for an unknown or repeated name, or for none at all."""
        what, known = f"topic {self.name!r}", self._schema.names
        if not names or len(set(names)) != len(names):
            raise SchemaMismatchError(f"{what}: columns must be distinct names, at least one")
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SchemaMismatchError(f"{what}: no column {unknown[0]!r}; it has {known}")
        return tuple(known.index(n) for n in names)

    def select_storage(
        self, stored: pa.Table | pa.RecordBatch, at: Sequence[int]
    ) -> pa.RecordBatch:
        """``from_storage`` of a read of the columns at ``at`` only (``projection``), in
        that order: the batch holds those columns."""
        if stored.num_columns != len(at):
            raise SchemaMismatchError(
                f"topic {self.name!r}: rows have {stored.num_columns} values, expected {len(at)}"
            )
        cols = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in stored.columns]
        return self._assemble(cols, lambda codec, col: codec.from_storage(col), at)

    def _assemble(
        self,
        cols: Sequence[Any],
        convert: Callable[[_ColCodec, Any], Any],
        at: Sequence[int] | None = None,
    ) -> pa.RecordBatch:
        """The batch of ``convert``'s array of each column (its codec, its values), of
        every column or those at ``at``: ``SchemaMismatchError`` names a column that does
        not convert or has a null where none may be."""
        what, arrays = f"topic {self.name!r}", []
        schema = self._schema if at is None else pa.schema([self._schema.field(i) for i in at])
        codecs = self._codecs if at is None else [self._codecs[i] for i in at]
        for f, codec, values in zip(schema, codecs, cols, strict=True):
            try:
                arrays.append(convert(codec, values))
            except _ARROW_ERRORS as exc:
                raise SchemaMismatchError(f"{what}: column {f.name!r}: {exc}") from exc
            if not f.nullable and arrays[-1].null_count:
                raise SchemaMismatchError(f"{what}: NOT NULL column {f.name!r} has nulls")
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def from_arrow_rows(
        self, data: pa.RecordBatch | pa.Table, *, with_meta: bool, fill_missing: bool = False
    ) -> list[tuple[Any, ...]]:
        """Inverse of ``to_arrow``: SQL tuples (full rows, or field values only).

        ``data`` must have exactly the columns (``with_meta``: metadata and field columns,
        else the field columns), in any order, matched by name. A missing, unknown or
        repeated column, a type that does not fit, a value a cast would change or a null in
        a NOT NULL column (nested fields included) raise ``SchemaMismatchError`` naming the
        column. Types fit when they are the same kind of value: a wider or value-checked
        cast within a family (int32 into int64, int64 into int32 when every value fits,
        large_string into string, ns into us when no precision is lost), an int into a
        float (exact values only), dictionary-encoded values, structs by field name; never
        text into numbers, a float into a narrower float, or added or dropped struct fields.

        ``fill_missing=True`` reads rows written under an older version of the schema
        (broker payloads, Parquet): a missing nullable column becomes None.

        Example::

            topic = TopicSchema.from_arrow("cdc", pa.schema([pa.field("op", pa.string(), False)]))
            topic.from_arrow_rows(pa.table({"op": ["c", "u"]}), with_meta=False)  # [("c",), ("u",)]
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
        absent = [f.name for f in fields if f.name not in present]
        if absent and not fill_missing:
            raise SchemaMismatchError(f"{what}: missing column(s) {absent}")
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
            nested = _nested_null(arr, f.type)
            if nested is not None:
                raise SchemaMismatchError(f"{where}: NOT NULL field {f.name}{nested} holds nulls")
            try:
                cols.append(codec.from_arrow(arr))
            except _ARROW_ERRORS as exc:
                raise SchemaMismatchError(f"{where}: {exc}") from exc
        return list(zip(*cols, strict=True)) if cols else [()] * data.num_rows
