"""Starting a streaming projection: the query, its sinks and its progress.

Example::

    running = rv.spark.start_stream(stock_levels, app)              # the handlers
    running = rv.spark.start_stream(sku_hours, app, revenue, trigger="5s")
    running.wait_for_positions({("Order", 0): 1200})
    running.stop()
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..collect.component import Component, ReadModel
from ..errors import SpecError, StreamError
from ..store.streamsink import Part, SqlStreamSink
from .fold import TopicPlan
from .stream import (
    ROCKSDB,
    Pipeline,
    Reader,
    StreamProgress,
    StreamQuery,
    Topics,
    batch_writer,
    check_columns,
    default_checkpoint,
    new_run,
    open_sink,
    parse_trigger,
    reventless_reader,
    source_topics,
    store_url,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..app import App

log = logging.getLogger("reventless.spark")
OnProgress = Callable[[StreamProgress], None]
_START = "reventless-start.pkl"
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"


def plans_of(model: Component, app: App) -> list[TopicPlan]:
    """The topics ``model``'s handlers read, planned as the rebuild plans them; a
    ``StreamError`` for anything that is not a keyed read model with handlers."""
    if not isinstance(model, ReadModel):
        raise StreamError(f"{model.name}: only read models stream into a table")
    if not (model.handlers or model.topic_handlers):
        raise StreamError(
            f"{model.name}: no handlers and no pipeline: give start_stream a pipeline"
        )
    from .rebuild import plan

    try:
        return plan(model, app)
    except SpecError as exc:
        raise StreamError(str(exc)) from None


def _start_state(
    checkpoint: Path, sink: SqlStreamSink, handlers: bool
) -> tuple[str, dict[Part, int], list[tuple[Any, ...]]]:
    """The run id, the checkpoints the run started from and (handlers) the table's rows
    then: snapshotted on the checkpoint's first start and read back on restarts, so a
    replayed first batch starts from the same state."""
    run = new_run(checkpoint)
    path = checkpoint / _START
    if path.is_file():
        saved = pickle.loads(path.read_bytes())
        return run, saved["checkpoints"], saved["rows"]
    rows, checkpoints = sink.snapshot_sync()
    kept = rows if handlers else []
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps({"checkpoints": checkpoints, "rows": kept}))
    tmp.replace(path)
    return run, checkpoints, kept


def start_stream(
    model: ReadModel[Any],
    app: App,
    pipeline: Pipeline | None = None,
    *,
    spark: SparkSession | None = None,
    master: str | None = None,
    checkpoint: str | Path | None = None,
    trigger: str | float | None = "5s",
    reader: Reader | None = None,
    max_events_per_trigger: int | None = None,
    on_progress: Callable[[StreamProgress], None] | None = None,
) -> StreamQuery:
    """Start ``model`` as a streaming projection of ``app``'s log and return it running.

    ``pipeline`` maps the topics' streaming frames (``Topics``) to a frame with one
    column per field of ``model.row`` (in update output mode: aggregations emit the keys
    a batch changed); without it the model's decorated handlers run in a stateful
    operator. ``checkpoint`` (default ``<workdir>/streams/<name>``) is Spark's checkpoint:
    a restart from it continues exactly after the last committed batch. A new
    checkpoint starts a handler stream at the read model's checkpoints (its table as it
    is: after a rebuild, or handed over by a paused live collector) and a pipeline at
    the start of the log. ``trigger``: ``"5s"``, ``"500ms"``, ``"available"`` (what is
    there, then stop). ``reader`` reads a topic (default: the ``reventless`` data
    source on the app's store, ``max_events_per_trigger`` per batch). ``on_progress``
    gets a ``StreamProgress`` after every batch (on the thread reporting progress).
    """
    from .session import session

    kwargs = parse_trigger(trigger)
    handlers = pipeline is None
    plans = plans_of(model, app) if handlers else []
    if not handlers and not isinstance(model, ReadModel):
        raise StreamError(f"{getattr(model, 'name', model)!r}: a pipeline writes a read model")
    url = store_url(app)
    spark = spark or session(master)
    # Spark's RocksDB state store (transformWithState needs it) for this query only: a
    # query keeps the session's settings of its start (and its checkpoint records them)
    before = spark.conf.get(_PROVIDER, None)
    spark.conf.set(_PROVIDER, ROCKSDB)
    try:
        return _start(
            model,
            app,
            pipeline,
            spark,
            url,
            checkpoint,
            kwargs,
            handlers,
            plans,
            reader,
            max_events_per_trigger,
            on_progress,
        )
    finally:
        if before is None:
            spark.conf.unset(_PROVIDER)
        else:
            spark.conf.set(_PROVIDER, before)


def _start(
    model: ReadModel[Any],
    app: App,
    pipeline: Pipeline | None,
    spark: SparkSession,
    url: str,
    checkpoint: str | Path | None,
    kwargs: dict[str, Any],
    handlers: bool,
    plans: list[TopicPlan],
    reader: Reader | None,
    max_events_per_trigger: int | None,
    on_progress: OnProgress | None,
) -> StreamQuery:
    where = Path(checkpoint) if checkpoint is not None else default_checkpoint(model.name)
    read = reader or reventless_reader(url, max_events=max_events_per_trigger)
    if not handlers:  # a pipeline is checked before anything is written
        assert pipeline is not None
        out: DataFrame = pipeline(Topics(spark, list(app.topics), read, {}, url))
        check_columns(model, out)
    sink = open_sink(model, url)
    run, start, rows = _start_state(where, sink, handlers)
    if handlers:
        from .streamstate import handler_rows

        topics = Topics(spark, list(app.topics), read, start, url)
        frames = [topics[p.name] for p in plans]
        out = handler_rows(spark, model, plans, frames, rows)
    committed: dict[int, tuple[int, dict[Part, int]]] = {}

    def on_commit(batch_id: int, n: int, positions: dict[Part, int]) -> None:
        committed[batch_id] = (n, positions)
        del_old = [b for b in committed if b < batch_id - 100]
        for b in del_old:
            committed.pop(b, None)

    write = batch_writer(model, sink, where, run, start, handlers, on_commit, source_topics(out))
    query = (
        out.writeStream.queryName(f"reventless_{model.name}".replace(".", "_"))
        .outputMode("update")
        .option("checkpointLocation", str(where))
        .foreachBatch(write)
        .trigger(**kwargs)
        .start()
    )
    running = StreamQuery(model.name, query, sink)
    running.run = run
    watch(running, committed, on_progress)
    return running


def watch(
    running: StreamQuery,
    committed: Mapping[int, tuple[int, dict[Part, int]]],
    on_progress: OnProgress | None,
    every: float = 0.2,
) -> None:
    """Report each finished batch of ``running`` (``StreamProgress``) and count its late
    rows, from Spark's progress reports (a thread polling them: Python streaming
    listeners are not called in every setup)."""
    import json

    def report(p: Mapping[str, Any]) -> None:
        batch = int(p["batchId"])
        ops = p.get("stateOperators") or []
        late = sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in ops)
        n, positions = committed.get(batch, (0, {}))
        lag: dict[str, int] = {}
        if running.sink is not None:
            running.sink.add_late_sync(running.name, late)
            lag = running.sink.lag_sync(positions) if positions else {}
        got = StreamProgress(
            running.name,
            batch,
            int(p.get("numInputRows") or 0),
            n,
            late,
            lag,
            float(p.get("batchDuration") or 0) / 1000.0,
            (p.get("eventTime") or {}).get("watermark"),
            dict(positions),
        )
        running.notify(got)
        if on_progress is not None:
            on_progress(got)

    def run() -> None:
        seen = -1
        while True:
            active = running.query.isActive
            try:
                recent = [json.loads(x.json) for x in running.query.recentProgress]
            except Exception:  # the query (or the JVM) is gone
                recent = []
            for p in recent:
                if int(p["batchId"]) > seen:
                    seen = int(p["batchId"])
                    try:
                        report(p)
                    except Exception:
                        log.exception("stream %s: progress report failed", running.name)
            if not active:
                with running.changed:
                    running.changed.notify_all()
                return
            time.sleep(every)

    running.reporter = threading.Thread(
        target=run, name=f"reventless-stream-{running.name}", daemon=True
    )
    running.reporter.start()
