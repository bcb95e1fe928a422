"""A read model's own handlers in a stateful streaming operator, keyed by its key.

Each topic's events are decoded in executors (``mapInArrow``: the topic's codec and
upcasters, as the rebuild and the live collector decode them) into ``_gkey`` (the row
key the handler writes, as text), ``_tidx`` (the topic), ``_off`` (the offset) and
``_row`` (the decoded row, pickled). ``transformWithStateInPandas`` groups them by
``_gkey``; ``HandlerProcessor`` keeps each key's current row in Spark's state store and
folds the key's events of a micro-batch (topic, then offset order) through the model's
handlers with the rebuild's ``Folder``, emitting the key's final row (``_vals``: SQL
values, pickled; null for a delete). A stream taking a read model over starts from the
table's rows (``initialState``, snapshotted with the checkpoints it continues from).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..codec import OFFSET_AT, TYPE_AT
from ..collect.component import ReadModel
from ..errors import StreamError
from .fold import Folder, RebuildError, TopicPlan, decode, has_personal, row_schema, schema_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EVENTS = pa.schema(
    [
        pa.field("_gkey", pa.string()),
        pa.field("_tidx", pa.int32()),
        pa.field("_off", pa.int64()),
        pa.field("_row", pa.binary()),
    ]
)
OUTPUT = "_gkey string, _key binary, _vals binary"
STATE = "vals binary"


def shaped(tidx: int, plan: TopicPlan) -> Any:
    """The ``mapInArrow`` function turning a topic's rows into ``EVENTS`` rows."""
    from .arrow import from_spark

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = schema_of(plan.recipe)
        known = schema.event_types
        for batch in batches:
            rows = schema.from_arrow_rows(from_spark(batch, schema.arrow_schema), with_meta=True)
            keys, offs, blobs = [], [], []
            for row in rows:
                etype = row[TYPE_AT]
                spec = plan.handler(etype)
                if known and etype not in known:
                    raise RebuildError(
                        f"unknown event type {etype!r} (no class of this topic has it)",
                        plan.name,
                        int(row[OFFSET_AT]),
                        str(etype),
                    )
                if spec is None:
                    continue
                key = spec.key(decode(schema, plan.name, row))
                keys.append(str(key))
                offs.append(int(row[OFFSET_AT]))
                blobs.append(pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(keys, pa.string()),
                    pa.array([tidx] * len(keys), pa.int32()),
                    pa.array(offs, pa.int64()),
                    pa.array(blobs, pa.binary()),
                ],
                schema=EVENTS,
            )

    return run


def events(frames: Sequence[DataFrame], plans: Sequence[TopicPlan]) -> DataFrame:
    """One streaming frame of every handled event of ``plans`` (``EVENTS`` columns)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    if has_personal(plans):
        raise StreamError(
            "streaming read models over topics with personal fields are not supported "
            "(rebuild them with rv.spark.rebuild)"
        )
    out: DataFrame | None = None
    struct = from_arrow_schema(EVENTS)
    for i, (df, plan) in enumerate(zip(frames, plans, strict=True)):
        if "*" not in plan.handlers:
            known = list(schema_of(plan.recipe).event_types)
            cond = F.col("_type").isin(list(plan.handlers))
            if known:  # unknown types pass on: the operator stops on them, naming them
                cond = cond | ~F.col("_type").isin(known)
            df = df.where(cond)
        one = df.mapInArrow(shaped(i, plan), struct)
        out = one if out is None else out.unionByName(one)
    assert out is not None
    return out


def initial_state(
    spark: SparkSession, model: ReadModel[Any], rows: list[tuple[Any, ...]]
) -> DataFrame:
    """The table's rows (SQL values) as the operator's initial state, grouped by key."""
    at = [c.name for c in row_schema(model).columns].index(model.key)
    data = [(str(r[at]), pickle.dumps(r[at]), pickle.dumps(r)) for r in rows]
    return spark.createDataFrame(data, "_gkey string, _key binary, _vals binary")


def handler_rows(
    spark: SparkSession,
    model: ReadModel[Any],
    plans: Sequence[TopicPlan],
    frames: Sequence[DataFrame],
    initial: list[tuple[Any, ...]],
) -> DataFrame:
    """The stream of changed rows (``OUTPUT``) of ``model``'s handlers over ``frames``."""
    grouped = events(frames, plans).groupBy("_gkey")
    init = initial_state(spark, model, initial).groupBy("_gkey")
    return grouped.transformWithStateInPandas(
        statefulProcessor=HandlerProcessor(model, list(plans)),
        outputStructType=OUTPUT,
        outputMode="Update",
        timeMode="None",
        initialState=init,
    )


def _processor_base() -> type:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    return StatefulProcessor


class HandlerProcessor(_processor_base()):  # type: ignore[misc]
    """Folds a key's events through the read model's handlers (see the module docstring)."""

    def __init__(self, model: ReadModel[Any], plans: list[TopicPlan]) -> None:
        self.model, self.plans = model, plans

    def init(self, handle: Any) -> None:
        self.row = handle.getValueState("row", STATE)
        self.codec = row_schema(self.model)
        self.encode = self.codec.encoder(self.model.row.__name__)
        self.folder = Folder(self.model)
        self.schemas = [schema_of(p.recipe) for p in self.plans]

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Any:
        import pandas as pd  # type: ignore[import-untyped]

        frames = [f for f in rows if len(f)]
        if not frames:
            return
        batch = pd.concat(frames)
        batch.columns = list(EVENTS.names)  # PySpark may name them by position
        batch = batch.sort_values(["_tidx", "_off"], kind="stable")
        got = self.row.get() if self.row.exists() else None
        current = None
        if got is not None:
            current = self.codec.decode(self.model.row.__name__, pickle.loads(got[0]))
        state: dict[Any, Any] = {}
        first = True
        typed_key: Any = None
        for tidx, blob in zip(batch["_tidx"], batch["_row"], strict=True):
            plan = self.plans[int(tidx)]
            row = pickle.loads(blob)
            ev = decode(self.schemas[int(tidx)], plan.name, row)
            spec = plan.handler(row[TYPE_AT])
            assert spec is not None
            if first:
                typed_key, first = spec.key(ev), False
                state[typed_key] = current
            self.folder.apply(state, ev, spec)
        final = state.get(typed_key)
        gkey = key[0]
        if final is None:
            if self.row.exists():
                self.row.clear()
            vals = None
        else:
            vals = pickle.dumps(tuple(self.encode(final)))
            self.row.update((vals,))
        yield pd.DataFrame({"_gkey": [gkey], "_key": [pickle.dumps(typed_key)], "_vals": [vals]})

    def handleInitialState(self, key: Any, initialState: Any, timerValues: Any) -> None:
        self.row.update((initialState.iloc[0, 2],))  # _gkey, _key, _vals (maybe unnamed)

    def close(self) -> None:
        pass
