"""Folding a read model's handlers over events grouped by key (runs in Spark executors).

The rebuild sorts each Spark partition by ``(group key, topic, offset)`` and streams it
through ``fold_partition``: rows are decoded with the topic's own codec and upcasters
(the same ``envelope_of`` the live collector uses), each key's events are folded with the
read model's decorated handlers exactly as ``ReadModelCollector.apply_sync`` applies them,
and a key's final row is emitted as soon as its group ends, so memory stays bounded by
one group. Personal fields are opened first with the job's ``KeySource`` (only topics
with personal columns pay for it). Nothing here imports PySpark.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from ..codec import OFFSET_AT, TYPE_AT, TopicSchema
from ..collect.component import Delete, HandlerSpec, ReadModel, Upsert, as_ops
from ..decode import envelope_of, retired_models
from ..errors import ReventlessError
from ..spec import Aggregate, Envelope
from .arrow import from_spark
from .keysource import KeySource

_KIND_ARROW = {
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "text": pa.string(),
    "json": pa.string(),
    "blob": pa.binary(),
}
_OUT_BATCH = 10_000
_ERROR_AT = re.compile(r"RebuildError: (.*?) \[at (.*?)@(\d+) \((.*?)\)\]")


class RebuildError(ReventlessError):
    """A rebuild stopped: an event that does not decode, or a handler that failed.

    ``topic``, ``offset`` and ``event_type`` name the event."""

    def __init__(self, detail: str, topic: str = "", offset: int = 0, event_type: str = "") -> None:
        where = f" [at {topic}@{offset} ({event_type})]" if topic else ""
        super().__init__(f"{detail}{where}")
        self.detail, self.topic, self.offset, self.event_type = detail, topic, offset, event_type

    @classmethod
    def from_text(cls, text: str) -> RebuildError | None:
        """The error an executor raised, found in the text of Spark's exception."""
        found = _ERROR_AT.findall(text)
        if not found:
            return None
        detail, topic, offset, etype = found[-1]
        return cls(detail, topic, int(offset), etype)


#: (kind, topic name, spec class | event classes | model class | schema bytes)
Recipe = tuple[str, str, Any]


@lru_cache(maxsize=64)
def schema_of(recipe: Recipe) -> TopicSchema:
    """Rebuild a topic's schema in an executor, exactly as the App declares it."""
    kind, name, what = recipe
    if kind == "events":
        events = what.event_classes
        return TopicSchema.from_events(name, [*events, *retired_models(events)])
    if kind == "union":  # a DCB log: many event types, always tagged
        return TopicSchema.from_events(name, [*what, *retired_models(what)], tags=True)
    if kind == "model":
        return TopicSchema.from_model(name, what)
    return TopicSchema.from_arrow(name, pa.ipc.read_schema(pa.py_buffer(what)))


def recipe_of(name: str, schema: TopicSchema, spec: type[Aggregate] | None) -> Recipe:
    """How an executor rebuilds ``schema`` (aggregate topic, DCB log, model topic or Arrow
    topic)."""
    if spec is not None:
        return ("events", name, spec)
    if schema.tags_at is not None and schema.event_types:
        current = tuple(m for t, m in schema.event_types.items() if not t.endswith("@retired"))
        return ("union", name, current)
    if schema.event_types:
        return ("model", name, next(iter(schema.event_types.values())))
    fields = pa.schema(list(schema.arrow_schema)[-len(schema.columns) :] if schema.columns else [])
    return ("arrow", name, fields.serialize().to_pybytes())


@dataclass(frozen=True)
class TopicPlan:
    """One topic a read model reads: how to decode it and which handler takes each type."""

    name: str
    recipe: Recipe
    handlers: Mapping[str, HandlerSpec]  # event type (or "*") -> handler

    def handler(self, event_type: str) -> HandlerSpec | None:
        """The handler of ``event_type`` (or the topic-wide one)."""
        return self.handlers.get(event_type) or self.handlers.get("*")


def row_schema(model: ReadModel[Any]) -> TopicSchema:
    """The read model's row codec (the one its SQL table uses)."""
    return TopicSchema.from_model(model.name, model.row, personal=False)


def output_schema(model: ReadModel[Any]) -> pa.Schema:
    """Arrow schema of folded rows: the SQL values of the read model's table."""
    return pa.schema(
        [pa.field(c.name, _KIND_ARROW[c.sql_kind], True) for c in row_schema(model).columns]
    )


class Folder:
    """Applies a read model's handlers to a key's state, like the live collector."""

    def __init__(self, model: ReadModel[Any]) -> None:
        self.model, self.row_type, self.key_field = model, model.row, model.key

    def apply(self, state: dict[Any, Any], ev: Envelope[Any], spec: HandlerSpec) -> None:
        """Run ``spec`` on ``ev`` and record the rows it upserts or deletes in ``state``.

        A handler writing another key than the one its event is grouped under would be
        folded in the wrong group: that stops the rebuild."""
        key = spec.key(ev)
        try:
            out = spec.fn(ev, state.get(key)) if spec.wants_current else spec.fn(ev)
        except Exception as exc:
            detail = f"handler {spec.fn.__name__} failed: {type(exc).__name__}: {exc}"
            raise _error(ev, detail) from exc
        # The common case (one Upsert of the row type, of the event's key), inline:
        if (
            type(out) is Upsert
            and type(out.row) is self.row_type
            and getattr(out.row, self.key_field) == key
        ):
            state[key] = out.row
            return
        for op in as_ops(out):
            if isinstance(op, Upsert):
                if not isinstance(op.row, self.row_type):
                    raise _error(
                        ev, f"Upsert of {type(op.row).__name__}, expected {self.row_type.__name__}"
                    )
                k, row = getattr(op.row, self.key_field), op.row
            elif isinstance(op, Delete):
                k, row = op.key, None
            else:
                raise _error(ev, f"handlers return Upsert/Delete, got {op!r}")
            if k != key:
                raise _error(
                    ev,
                    f"handler {spec.fn.__name__} wrote key {k!r} but its event is keyed "
                    f"{key!r}: declare key= on @on so both agree",
                )
            state[k] = row


def _error(ev: Envelope[Any], detail: str) -> RebuildError:
    return RebuildError(f"{ev.topic!s}: {detail}", ev.topic, ev.offset, ev.type)


def decode(schema: TopicSchema, topic: str, row: tuple[Any, ...]) -> Envelope[Any]:
    """``envelope_of`` that names the offending event when it no longer decodes."""
    try:
        return envelope_of(schema, topic, row)
    except Exception as exc:
        raise RebuildError(
            f"event no longer decodes ({type(exc).__name__}: {exc}); register an upcaster "
            "or fix the event class",
            topic,
            int(row[OFFSET_AT]),
            str(row[TYPE_AT]),
        ) from exc


def has_personal(plans: Sequence[TopicPlan]) -> bool:
    """Whether any topic of ``plans`` has personal columns (sealed text to open)."""
    return any(schema_of(p.recipe).personal for p in plans)


def opened_rows(
    schema: TopicSchema, rows: list[tuple[Any, ...]], keys: KeySource | None
) -> list[tuple[Any, ...]]:
    """``rows`` with their personal fields opened by ``keys`` (as they are without any)."""
    if keys is None or not schema.personal:
        return rows
    return keys.keyring().open_rows(schema, rows)


def fold_partition(
    model: ReadModel[Any],
    plans: Sequence[TopicPlan],
    counter: Any = None,
    keys: KeySource | None = None,
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a rebuild (see the module docstring).

    Input columns: ``_gkey`` (group key), ``_tidx`` (index into ``plans``) and one struct
    column ``t<i>`` per topic holding its row; with one topic, ``_gkey`` and the topic's
    own columns. ``counter`` (a Spark accumulator) counts
    the events handled; ``keys`` opens personal fields (needed when a topic has some)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schemas = [schema_of(p.recipe) for p in plans]
        encode = row_schema(model).encoder(model.row.__name__)
        out_schema = output_schema(model)
        apply = Folder(model).apply
        names = [p.name for p in plans]
        specs: list[dict[str, HandlerSpec | None]] = [{} for _ in plans]  # filled as met
        state: dict[Any, Any] = {}
        group: Any = run  # a sentinel no key equals
        done: list[tuple[Any, ...]] = []
        handled = 0

        def flush() -> None:
            done.extend(encode(r) for r in state.values() if r is not None)
            state.clear()

        for batch in batches:
            gkeys = batch.column("_gkey").to_pylist()
            single = len(plans) == 1  # then the topic's columns come flat, no _tidx
            tidx_col = pa.nulls(0) if single else batch.column("_tidx")
            tidx = itertools.repeat(0, batch.num_rows) if single else tidx_col.to_pylist()
            rows: list[Iterator[tuple[Any, ...]]] = []
            for i in range(len(plans)):
                if single:
                    flat = batch
                else:
                    struct = pc.filter(batch.column(f"t{i}"), pc.equal(tidx_col, i))
                    flat = pa.RecordBatch.from_struct_array(struct)
                typed = from_spark(flat, schemas[i].arrow_schema)
                got = schemas[i].from_arrow_rows(typed, with_meta=True)
                rows.append(iter(opened_rows(schemas[i], got, keys)))
            for g, t in zip(gkeys, tidx, strict=True):
                row = next(rows[t])
                if g != group:
                    flush()
                    group = g
                etype = row[TYPE_AT]
                try:
                    spec = specs[t][etype]
                except KeyError:
                    spec = specs[t][etype] = _spec_of(plans[t], schemas[t], row)
                if spec is None:
                    continue
                apply(state, decode(schemas[t], names[t], row), spec)
                handled += 1
            if len(done) >= _OUT_BATCH:
                yield _batch(done, out_schema)
                done.clear()
        flush()
        if counter is not None:
            counter.add(handled)
        if done:
            yield _batch(done, out_schema)

    return run


def _spec_of(plan: TopicPlan, schema: TopicSchema, row: tuple[Any, ...]) -> HandlerSpec | None:
    """The handler of ``row``'s event type; an event type the topic has no class of stops
    the rebuild."""
    etype = row[TYPE_AT]
    if schema.event_types and etype not in schema.event_types:
        raise RebuildError(
            f"unknown event type {etype!r} (no class of this topic has it)",
            plan.name,
            int(row[OFFSET_AT]),
            str(etype),
        )
    return plan.handler(etype)


def _batch(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


def row_values(model: ReadModel[Any], row: BaseModel) -> tuple[Any, ...]:
    """SQL values of one read-model row (what its table stores)."""
    return tuple(row_schema(model).encoder(model.row.__name__)(row))
