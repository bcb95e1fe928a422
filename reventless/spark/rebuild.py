"""Rebuilding a read model from the log with Spark, and handing it to the live collector.

Example::

    async with app:
        report = await rv.spark.rebuild(directory, app)             # local[*]
        print(report.events_read, report.rows, report.seconds)
        snap = await rv.spark.rebuild(directory, app, as_of=1000)     # state at offset 1000
        print(snap.table)                         # rm_customer_directory__asof_1000
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import telemetry
from ..collect.collector import Collector
from ..collect.component import Component, ReadModel, default_key
from ..collect.upserts import KEY_COLUMN
from ..errors import SpecError, StoreError
from ..eventlog import EventLog
from ..store import SqlEventStore, require_sql
from ..store.database import table_name
from ..store.swap import SqlRebuildLog, SqlTableVersions, TableVersions
from .fold import (
    RebuildError,
    TopicPlan,
    fold_partition,
    has_personal,
    output_schema,
    recipe_of,
    schema_of,
)
from .keysource import KeySource
from .source import Source, default_workdir, log_frame
from .swap import catch_up, staged_rows, version_name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ..app import App

Part = tuple[str, int]
_EVENTS_PER_TASK = 1_000_000
AsOf = int | datetime | Mapping[str, int]
Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What a rebuild did.

    ``events_read``: log offsets the rebuild covered; ``events_applied``: events handed to
    handlers (including those applied at hand-off); ``rows``: rows in the new table;
    ``checkpoints``: the collector's checkpoints after the hand-off (empty for as-of
    snapshots); ``table``: where the rows are; ``path``: ``python`` (the decorated
    handlers in executors) or ``vectorised`` (compiled column upserts)."""

    model: str
    path: Literal["python", "vectorised"]
    events_read: int
    events_applied: int
    rows: int
    seconds: float
    upto: dict[str, int]
    table: str
    checkpoints: dict[Part, int] = field(default_factory=dict)


def plan(model: Component, app: App) -> list[TopicPlan]:
    """Check ``model`` can be rebuilt in ``app`` and plan its topics (no I/O).

    Raises ``SpecError`` for anything but a keyed ReadModel with handlers for topics of
    ``app``; the topics come in the order the live collector catches them up in."""
    if not isinstance(model, ReadModel):
        raise SpecError(f"{model.name}: only ReadModels can be rebuilt (a keyed table)")
    key = getattr(model, "key", None)
    if not key or key not in model.row.model_fields:
        raise SpecError(f"{model.name}: a read model needs a key that is a field of its row")
    order = app.topology().dispatch_of(model)  # as the live collector dispatches it
    plans = []
    for name, handlers in order.items():
        topic = app.topics[name]
        spec_cls = topic.spec if isinstance(topic, EventLog) else None
        plans.append(TopicPlan(name, recipe_of(name, topic.schema, spec_cls), handlers))
    return plans


def _key_column(plan: TopicPlan) -> Column | None:
    """The group key as a Spark expression, or None when a key function must run (or the
    key is a personal field: sealed text differs per event, the opened value does not)."""
    from pyspark.sql import functions as F

    sealed = {c.name for c in schema_of(plan.recipe).columns if c.personal is not None}
    cases: list[tuple[list[str], str]] = []
    for etype, spec in plan.handlers.items():
        if spec.key is default_key:
            col = "_aggregate_id"
        else:
            named = getattr(spec.key, KEY_COLUMN, None)
            if named is None:
                return None
            col = str(named)
            if col in sealed:
                return None
        for types, c in cases:
            if c == col:
                types.append(etype)
                break
        else:
            cases.append(([etype], col))
    if len(cases) == 1 or "*" in plan.handlers:
        return F.col(cases[0][1]).cast("string")
    expr = F.when(F.col("_type").isin(cases[0][0]), F.col(cases[0][1]).cast("string"))
    for types, col in cases[1:]:
        expr = expr.when(F.col("_type").isin(types), F.col(col).cast("string"))
    return expr


def _python_keys(df: DataFrame, plan: TopicPlan, keys: KeySource | None) -> DataFrame:
    """Add ``_gkey`` by running the handlers' key functions (decoded envelopes, personal
    fields opened with ``keys``)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    from .arrow import from_spark
    from .fold import decode, opened_rows

    arrow_in = to_arrow_schema(df.schema, timezone="UTC")  # 4.3 asks; 4.0 assumed UTC
    arrow_out = arrow_in.append(pa.field("_gkey", pa.string()))
    recipe, name, handler = plan.recipe, plan.name, plan.handler

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        schema = schema_of(recipe)
        for batch in batches:
            rows = schema.from_arrow_rows(from_spark(batch, schema.arrow_schema), with_meta=True)
            gkeys = []
            for row in opened_rows(schema, rows, keys):
                spec = handler(row[5])
                k = None if spec is None else spec.key(decode(schema, name, row))
                gkeys.append(None if k is None else str(k))
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(gkeys, pa.string())], schema=arrow_out
            )

    return df.mapInArrow(run, from_arrow_schema(arrow_out))


def _events(frames: list[DataFrame], plans: list[TopicPlan], keys: KeySource | None) -> DataFrame:
    """One frame of every handled event: ``_gkey``, ``_tidx``, ``_off``, ``t<i>`` structs
    (a single topic: ``_gkey`` and the topic's own columns)."""
    from pyspark.sql import functions as F

    shaped = []
    structs = [f.schema for f in frames]
    for i, (df, p) in enumerate(zip(frames, plans, strict=True)):
        schema = schema_of(p.recipe)
        if "*" not in p.handlers:
            known = list(schema.event_types)
            cond = F.col("_type").isin(list(p.handlers))
            if known:  # unknown types pass on: the fold stops on them, naming them
                cond = cond | ~F.col("_type").isin(known)
            df = df.where(cond)
        key = _key_column(p)
        if key is None:
            df = _python_keys(df, p, keys)
            key = F.col("_gkey")
        cols = [F.col(c) for c in structs[i].fieldNames()]
        if len(plans) == 1:  # one topic: its columns as they are (less to shuffle and convert)
            return df.select(key.alias("_gkey"), *cols)
        parts = [key.alias("_gkey"), F.lit(i).alias("_tidx"), F.col("_offset").alias("_off")]
        for j, st in enumerate(structs):
            parts.append(
                F.struct(*cols).alias(f"t{j}") if j == i else F.lit(None).cast(st).alias(f"t{j}")
            )
        shaped.append(df.select(*parts))
    out = shaped[0]
    for other in shaped[1:]:
        out = out.unionByName(other)
    return out


def _fold(
    spark: SparkSession,
    model: ReadModel[Any],
    plans: list[TopicPlan],
    events: DataFrame,
    counter: Any,
    keys: KeySource | None,
    total: int = 0,
) -> DataFrame:
    from pyspark.sql.pandas.types import from_arrow_schema

    # At least one partition per _EVENTS_PER_TASK events: each task sorts its partition,
    # and a sort that outgrows its share of execution memory spills to disk.
    n = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    n = max(n, -(-total // _EVENTS_PER_TASK))  # total: events in the log
    order = ["_tidx", "_off"] if len(plans) > 1 else ["_offset"]
    ordered = events.repartition(n, "_gkey").sortWithinPartitions("_gkey", *order)
    return ordered.mapInArrow(
        fold_partition(model, plans, counter, keys), from_arrow_schema(output_schema(model))
    )


def _spark_error(exc: BaseException) -> BaseException:
    found = RebuildError.from_text(str(exc))
    return found if found is not None else exc


async def _resolve_as_of(store: SqlEventStore, names: list[str], as_of: AsOf) -> dict[str, int]:
    heads = {n: await store.head(n) for n in names}
    if isinstance(as_of, Mapping):
        return {n: min(int(as_of.get(n, heads[n])), heads[n]) for n in names}
    if isinstance(as_of, int):
        return {n: min(as_of, heads[n]) for n in names}
    micros = int(as_of.timestamp() * 1_000_000)
    log = SqlRebuildLog(store)
    return {n: await log.offset_at(n, micros) for n in names}


async def _open_store(app: App, names: list[str]) -> tuple[SqlEventStore, bool]:
    """The app's store if it runs, else the store opened here (topics checked, no relay
    or collectors started: safe next to a running application)."""
    topic = app.topics[names[0]]
    try:
        running = topic.store
    except StoreError:
        pass
    else:
        return require_sql(running, "a Spark rebuild"), False
    store = require_sql(app.store, "a Spark rebuild")
    await store.open()
    for t in app.topics.values():
        await store.register(t.definition)
    return store, True


def _running(app: App, name: str) -> Collector | None:
    try:
        return app.collector(name)
    except SpecError:
        return None


@telemetry.rebuilds
async def rebuild(
    model: ReadModel[Any],
    app: App,
    *,
    spark: SparkSession | None = None,
    master: str | None = None,
    source: Source = "auto",
    as_of: AsOf | None = None,
    workdir: str | Path | None = None,
    fast: bool | None = None,
    progress: Progress | None = None,
) -> RebuildReport:
    """Rebuild ``model`` from ``app``'s log with Spark and swap the result in.

    Runs the read model's own decorated handlers in Spark executors (or, with ``fast``,
    its compiled column upserts; ``None``: whenever it can), writes the rows into a new
    table version, swaps it in atomically and sets the checkpoints so the live collector
    (running in this App, or started later) continues exactly after the rebuild.

    ``as_of`` (an offset, a per-topic mapping of offsets, or a datetime) builds the state
    at that point into ``rm_<name>__asof_<offset>`` instead and leaves the live table
    and checkpoints alone. ``app`` need not be running: the store is then opened here.

    Personal fields (``rv.Personal``) are opened in the executors with keys read from
    the store (the master key travels with the job, see ``KeySource``): handlers see
    them as the live collector does, a forgotten subject's as ``rv.ERASED``. Column
    upserts reading a personal field take the handlers' path.
    """
    from .session import session
    from .vector import compile_upserts

    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    plans = plan(model, app)
    names = [p.name for p in plans]
    compiled = compile_upserts(model, plans) if fast is not False else None
    if fast and compiled is None:
        raise SpecError(
            f"{model.name}: fast=True needs handlers declared with rv.ColumnUpserts "
            "(over columns that are not personal data)"
        )
    store, owned = await _open_store(app, names)
    keys: KeySource | None = None
    try:
        if has_personal(plans):  # executors (and the swap's catch-up) open them
            keys = KeySource.of(store)
        spark = spark or session(master)
        work = Path(workdir) if workdir is not None else default_workdir()
        upto = await _resolve_as_of(store, names, as_of if as_of is not None else {})
        where = spark.sparkContext.master
        say(f"reading {sum(upto.values())} events of {', '.join(names)} on {where}")
        frames = [
            await log_frame(spark, store, store.topic(n), upto=upto[n], source=source, workdir=work)
            for n in names
        ]
        if compiled is not None:
            rows_df, handled = compiled(frames)
        else:
            counter = spark.sparkContext.accumulator(0)
            shaped = _events(frames, plans, keys)
            rows_df = _fold(spark, model, plans, shaped, counter, keys, sum(upto.values()))
            handled = lambda: int(counter.value)  # noqa: E731
        stage = work / "staging" / f"{table_name('rm_', model.name)}-{uuid.uuid4().hex[:8]}"
        say("folding events with " + ("compiled column upserts" if compiled else "the handlers"))
        try:
            await asyncio.to_thread(lambda: rows_df.write.mode("overwrite").parquet(str(stage)))
        except Exception as exc:
            raise _spark_error(exc) from None
        version = version_name(model)
        versions = SqlTableVersions(store)
        try:
            say("loading rows into a new table version")
            rows = await versions.load(model, version, staged_rows(stage))
            applied = handled()
            if as_of is not None:
                target = f"{table_name('rm_', model.name)[:40]}__asof_{max(upto.values())}"
                await versions.install(version, target)
                return RebuildReport(
                    model.name,
                    "vectorised" if compiled else "python",
                    sum(upto.values()),
                    applied,
                    rows,
                    time.perf_counter() - started,
                    upto,
                    target,
                )
            say("swapping the new version in")
            final, extra = await _swap(versions, store, app, model, plans, version, upto, keys)
        except BaseException:
            await versions.drop(version)
            raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return RebuildReport(
            model.name,
            "vectorised" if compiled else "python",
            sum(upto.values()),
            applied + extra,
            rows + 0,
            time.perf_counter() - started,
            upto,
            table_name("rm_", model.name),
            final,
        )
    finally:
        if keys is not None:
            keys.release()
        if owned:
            await store.close()


async def _swap(
    versions: TableVersions,
    store: SqlEventStore,
    app: App,
    model: ReadModel[Any],
    plans: list[TopicPlan],
    version: str,
    upto: dict[str, int],
    keys: KeySource | None,
) -> tuple[dict[Part, int], int]:
    names = list(upto)
    heads = await store.partition_heads(names, upto=upto)
    collector = _running(app, model.name)
    apply = catch_up(model, plans, keys)
    if collector is None:
        return await versions.swap(model, version, heads, apply)
    async with collector.exclusive():
        final, extra = await versions.swap(model, version, heads, apply)
        collector.reset_checkpoints(final)  # adopt what the swap committed
    return final, extra
