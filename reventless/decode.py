"""Decoding stored rows into envelopes and events, including schema evolution.

Rows carry ``_schema_version``. A row older than its class is turned into a dict of
its stored columns (JSON-compatible values), passed through the class's upcasters one
version at a time (``@rv.upcasts``), then validated as the current class. A row newer
than its class, or a missing upcaster, fails loudly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import create_model

from .codec import (
    AGGREGATE_AT,
    CORRELATION_AT,
    FIELDS_AT,
    MSG_ID_AT,
    OFFSET_AT,
    PRODUCED_AT_AT,
    ROW_IDX_AT,
    SCHEMA_VERSION_AT,
    TAGS_COLUMN,
    TENANT_AT,
    TRACE_AT,
    TYPE_AT,
    VERSION_AT,
    Plaintext,
    TopicSchema,
)
from .errors import SchemaMismatchError, UnknownEventTypeError
from .personal import ERASED
from .spec import Envelope, Event, Metadata
from .store.append import StoredRow

if TYPE_CHECKING:
    from .store.port import Store


def retired_models(events: Sequence[type[Event]]) -> list[type[Event]]:
    """Stand-in event types whose fields are the retired fields of ``events``: they keep
    the old columns in the topic's schema (nothing is ever decoded as them)."""
    out: list[type[Event]] = []
    for e in events:
        if e.retired_fields:
            fields: dict[str, Any] = {n: (t | None, None) for n, t in e.retired_fields.items()}
            model = create_model(f"{e.__name__}Retired", __base__=Event, **fields)
            model.event_type = f"{e.event_type}@retired"
            out.append(model)
    return out


async def opened(store: Store, schema: TopicSchema, rows: Sequence[StoredRow]) -> list[Any]:
    """``rows`` with their personal fields opened by the store's keyring (rows of a topic
    without personal fields come back as they are): call it before decoding."""
    if not schema.personal or not rows:
        return rows if isinstance(rows, list) else list(rows)
    return await store.keyring.open_rows(schema, rows)


async def sealed(
    store: Store, schema: TopicSchema, rows: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """``rows`` (being appended) with their personal fields sealed by the store's keyring."""
    if not schema.personal:
        return rows
    return await store.keyring.seal_rows(schema, rows)


def decode_row(schema: TopicSchema, row: Sequence[Any]) -> Any:
    """The current-version event (or row dict) of a stored row."""
    return decode_values(schema, row[TYPE_AT], row[SCHEMA_VERSION_AT], row[FIELDS_AT:])


def decode_values(schema: TopicSchema, event_type: str, version: int, values: Sequence[Any]) -> Any:
    """The current-version event (or row dict) of a stored row's field ``values``."""
    if version == schema.versions.get(event_type, version):
        return schema.decode(event_type, values)
    return upcast(schema, event_type, version, values)


def upcast(schema: TopicSchema, event_type: str, version: int, values: Sequence[Any]) -> Any:
    """Turn a version-``version`` row into the current event class."""
    cls = schema.event_types[event_type]
    current = schema.versions[event_type]
    if version > current:
        raise UnknownEventTypeError(
            f"topic {schema.name!r}: {event_type} version {version} is newer than the code "
            f"(version {current})"
        )
    data: dict[str, Any] = {}
    erased: list[str] = []
    for col, value in zip(schema.columns, values, strict=True):
        if value is None or col.name == TAGS_COLUMN:  # tags are no event field
            continue
        if col.personal is not None:  # opened JSON text, else the subject is forgotten
            if type(value) is not Plaintext:
                erased.append(col.name)
                value = ERASED
            else:
                value = json.loads(value.text)
        elif col.sql_kind == "json" and isinstance(value, str):
            value = json.loads(value)
        data[col.name] = value
    upcasters = getattr(cls, "upcasters", {})
    for v in range(version, current):
        fn = upcasters.get(v)
        if fn is None:
            raise SchemaMismatchError(
                f"topic {schema.name!r}: {event_type} has no upcaster from version {v} "
                f"to {v + 1} (declare one with @rv.upcasts({v}))"
            )
        data = fn(dict(data))
    event = cls.model_validate(data)
    for name in erased:  # validation makes the placeholder a plain str
        if name in event.__dict__ and data.get(name) is ERASED:
            event.__dict__[name] = ERASED
    return event


#: The ``Metadata`` of a row's metadata values (correlation id .. tenant), made in C (a
#: named tuple: no Python call).
_meta_of = partial(tuple.__new__, Metadata)


class _Metas(dict[tuple[Any, ...], Metadata]):
    """Shared ``Metadata`` by its stored values, for pages whose rows share them (bulk
    appends, commands of many events): a known key is looked up in C, an unknown one made
    here, the cache emptied first once it holds 4096. Pages of mostly one-event commands
    (each correlated by its own id) make theirs with ``_meta_of`` instead: a miss per row
    costs a Python call."""

    def __missing__(self, key: tuple[Any, ...]) -> Metadata:
        if len(self) >= 4096:
            self.clear()
        meta = self[key] = _meta_of(key)
        return meta


_META_CACHE = _Metas()
#: Rows of a page whose correlation ids tell whether its rows share their metadata.
_SAMPLE = 32


def _shared(correlations: Sequence[str | None]) -> bool:
    """Whether the rows whose correlation ids (the first of a page) are these share their
    metadata: each id is on two rows or more, on average. A page is mostly of one kind
    (a bulk load, a stream of commands)."""
    return 2 * len(set(correlations)) <= len(correlations)


#: The columns of ``Metadata`` (correlation id .. tenant), in its field order.
_META_FROM, _META_TO = CORRELATION_AT, TENANT_AT + 1


_TAGS_CACHE: dict[str, tuple[str, ...]] = {"[]": ()}


def tags_of(text: str | None) -> tuple[str, ...]:
    """The tags of a stored row's tags column (its JSON text)."""
    if not text:
        return ()
    tags = _TAGS_CACHE.get(text)
    if tags is None:
        # Events of one decision share their tags: reuse the tuple (bounded like the meta)
        if len(_TAGS_CACHE) >= 4096:
            _TAGS_CACHE.clear()
            _TAGS_CACHE["[]"] = ()
        tags = _TAGS_CACHE[text] = tuple(json.loads(text))
    return tags


_tuple_new = tuple.__new__


def envelope_of(schema: TopicSchema, topic: str, row: StoredRow) -> Envelope[Any]:
    """Decode one stored row into an ``Envelope`` (raises ``UnknownEventTypeError``)."""
    return envelopes_of(schema, topic, (row,))[0]


def envelopes_of(schema: TopicSchema, topic: str, rows: Iterable[StoredRow]) -> list[Envelope[Any]]:
    """Decode stored rows into ``Envelope``s, in one call (a collector's page):
    current-version events go straight to their decoder; metadata is shared through a
    cache where rows share their correlation id. ``tuple.__new__`` skips the named
    tuples' Python-level ``__new__`` (of the envelope and its metadata)."""
    decoders = schema.decoders
    tags_at = schema.tags_at
    rows = rows if isinstance(rows, Sequence) else list(rows)
    meta_of = (
        _META_CACHE.__getitem__
        if _shared([r[CORRELATION_AT] for r in rows[:_SAMPLE]])
        else _meta_of
    )
    new = _tuple_new
    out: list[Envelope[Any]] = []
    append = out.append
    for row in rows:
        decode = decoders.get((row[TYPE_AT], row[SCHEMA_VERSION_AT]))
        meta = meta_of(row[_META_FROM:_META_TO])
        append(
            new(
                Envelope,
                (
                    decode_row(schema, row) if decode is None else decode(row[FIELDS_AT:]),
                    topic,
                    row[OFFSET_AT],
                    row[TYPE_AT],
                    row[AGGREGATE_AT],
                    row[VERSION_AT],
                    row[MSG_ID_AT],
                    row[PRODUCED_AT_AT],
                    meta,
                    row[SCHEMA_VERSION_AT],
                    row[ROW_IDX_AT],
                    () if tags_at is None else tags_of(row[tags_at]),
                    row[TRACE_AT],
                ),
            )
        )
    return out


_envelope = partial(_tuple_new, Envelope)


def _same(column: pa.ChunkedArray) -> tuple[bool, Any]:
    """``(True, value)`` if every row of ``column`` holds ``value`` (None included), else
    ``(False, None)``: Arrow counts in C what ``to_pylist`` would make a Python object of
    per row."""
    n = len(column)
    if column.null_count == n:
        return True, None
    if column.null_count or pc.count_distinct(column).as_py() != 1:
        return False, None
    return True, column[0].as_py()


def envelopes_of_arrow(schema: TopicSchema, topic: str, page: pa.Table) -> list[Envelope[Any]]:
    """``envelopes_of(schema, topic, rows_of(page))`` for a page of every stored column as
    Arrow (a SQLite file's helpers read them), built column by column: each column
    becomes Python values in one call, and the envelopes are put together by ``map`` and
    ``zip`` in C, not row by row in Python (~35% less per envelope). A column with one
    value in every row (the event type of a page of one type, a NULL metadata column)
    becomes that one object repeated: no Python object per row, and the type's string
    keeps its hash for the lookups made per event. Not for pages whose personal fields
    are still sealed (they are opened as rows)."""
    n = page.num_rows
    if not n:
        return []
    cols = page.columns

    def col(i: int) -> Iterable[Any]:
        c = cols[i]
        if c.null_count == n:
            return repeat(None, n)
        return c.to_pylist()  # type: ignore[no-any-return]

    fields = [col(i) for i in range(FIELDS_AT, len(cols))]
    values: Iterable[tuple[Any, ...]] = zip(*fields, strict=True) if fields else repeat((), n)
    decoders = schema.decoders
    one_type, event_type = _same(cols[TYPE_AT])
    one_version, version = _same(cols[SCHEMA_VERSION_AT])
    one = decoders.get((event_type, version)) if one_type and one_version else None
    types: Iterable[Any]
    versions: Iterable[Any]
    if one is not None:  # a page of one event type (the common case)
        events = list(map(one, values))
        types, versions = repeat(event_type, n), repeat(version, n)
    else:
        types, versions = cols[TYPE_AT].to_pylist(), cols[SCHEMA_VERSION_AT].to_pylist()
        events = [
            decode_values(schema, t, v, vals) if (d := decoders.get((t, v))) is None else d(vals)
            for t, v, vals in zip(types, versions, values, strict=True)
        ]
    keys = zip(*(col(i) for i in range(_META_FROM, _META_TO)), strict=True)
    shared = _shared(cols[CORRELATION_AT].slice(0, _SAMPLE).to_pylist())
    meta = map(_META_CACHE.__getitem__ if shared else _meta_of, keys)
    tags_at = schema.tags_at
    tags = repeat((), n) if tags_at is None else map(tags_of, col(tags_at))
    return list(
        map(
            _envelope,
            zip(
                events,
                repeat(topic, n),
                col(OFFSET_AT),
                types,
                col(AGGREGATE_AT),
                col(VERSION_AT),
                col(MSG_ID_AT),
                col(PRODUCED_AT_AT),
                meta,
                versions,
                col(ROW_IDX_AT),
                tags,
                col(TRACE_AT),
                strict=True,
            ),
        )
    )
