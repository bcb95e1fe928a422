"""Streaming projections: read models computed by Spark Structured Streaming over the log.

A streaming projection is a read model (``rv.ReadModel``: a keyed table) whose rows come
from a streaming query over the log's topics, either

* a pipeline: a function from the topics' streaming DataFrames to a DataFrame of rows
  (filter, map, event-time windows with watermarks, aggregations, joins between topics),
  one column per field of the read model's row; or
* the read model's own decorated handlers, run in a stateful operator keyed by the read
  model's key (``transformWithStateInPandas``, see ``streamstate.py``): one set of
  handlers serves the live collector, the batch rebuild and the stream.

Each micro-batch lands through ``foreachBatch`` in ONE store transaction with the
stream's position, keyed by the batch id (``reventless.store.streamsink``): a killed
query restarted from its Spark checkpoint neither loses nor doubles a row. The log
offsets the batch read up to become the read model's checkpoints, so the live
collector can take it back (``streamhandoff.py``).

Example::

    def revenue(topics: rv.spark.Topics) -> DataFrame:
        orders = topics["Order"].where("_type = 'OrderPlaced'")
        ...
        return rows                                 # one column per SkuHour field

    running = rv.spark.start_stream(sku_hours, app, revenue, trigger="5s")
    running.wait_for_positions({("Order", 0): 1200})   # or run until stopped
    running.stop()
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..collect.component import ReadModel
from ..errors import ReventlessError, StreamError
from ..store.database import Database, table_name
from ..store.streamsink import Part, SqlStreamSink, StreamBatch, StreamState
from .fold import row_schema
from .source import default_workdir

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from ..app import App

#: A topic's log as a streaming DataFrame: ``(spark, topic name, start offsets)``.
Reader = Callable[["SparkSession", str, Mapping[Part, int]], "DataFrame"]
#: A streaming projection's pipeline: the topics' streaming frames -> rows.
Pipeline = Callable[["Topics"], "DataFrame"]

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_TRIGGER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|m|min|minutes?)?\s*$")


def parse_trigger(trigger: str | float | None) -> dict[str, Any]:
    """Keyword arguments of ``DataStreamWriter.trigger``: ``"5s"``, ``"500ms"``, ``"1m"``,
    a number of seconds, or ``"available"`` (process what is there, then stop)."""
    if trigger is None:
        return {"processingTime": "5 seconds"}
    if isinstance(trigger, int | float) and not isinstance(trigger, bool):
        if trigger <= 0:
            raise StreamError(f"trigger must be positive, not {trigger!r}")
        return {"processingTime": f"{int(trigger * 1000)} milliseconds"}
    if isinstance(trigger, str) and trigger.strip() in ("available", "once"):
        return {"availableNow": True}
    found = _TRIGGER.match(trigger) if isinstance(trigger, str) else None
    if found is None:
        raise StreamError(
            f"trigger must be like '5s', '500ms', '1m' or 'available', not {trigger!r}"
        )
    unit = found.group(2) or "s"
    scale = 0.001 if unit == "ms" else 60.0 if unit.startswith("m") else 1.0
    seconds = float(found.group(1)) * scale
    if seconds <= 0:
        raise StreamError(f"trigger must be positive, not {trigger!r}")
    return {"processingTime": f"{max(1, int(seconds * 1000))} milliseconds"}


def reventless_reader(store_url: str, *, max_events: int | None = None) -> Reader:
    """Read topics through the ``reventless`` PySpark data source (``datasource.py``),
    each from after its checkpoints in ``start`` (its earliest where it has none)."""

    def read(spark: SparkSession, topic: str, start: Mapping[Part, int]) -> DataFrame:
        from .datasource import register

        register(spark)
        r = spark.readStream.format("reventless").option("store", store_url)
        r = r.option("topic", topic)
        if max_events is not None:
            r = r.option("maxEventsPerTrigger", str(max_events))
        mine = {p: o for (t, p), o in start.items() if t == topic}
        if mine:  # the source's offsets are the next offset to read per partition
            r = r.option("startingOffsets", json.dumps({str(p): o + 1 for p, o in mine.items()}))
        return r.load()

    return read


class Topics(Mapping[str, "DataFrame"]):
    """The topics of an App as streaming DataFrames (read once each, on first use).

    ``static(name)`` is a topic as a batch DataFrame, for a join between a stream and
    another topic's events (Spark reads it again for every micro-batch, up to the head
    of that moment): a stream-stream join needs append mode, and projections upsert."""

    def __init__(
        self,
        spark: SparkSession,
        names: list[str],
        reader: Reader,
        start: Mapping[Part, int],
        store: str | None = None,
    ) -> None:
        self.spark, self.names, self.reader, self.start = spark, names, reader, start
        self.store = store
        self._frames: dict[str, DataFrame] = {}

    def static(self, name: str) -> DataFrame:
        """Topic ``name``'s events as a batch DataFrame (the ``reventless`` data source)."""
        if name not in self.names:
            raise StreamError(f"no topic {name!r} (topics: {', '.join(sorted(self.names))})")
        if self.store is None:
            raise StreamError("these topics were not opened on a store: no static reads")
        from .datasource import register

        register(self.spark)
        reader = self.spark.read.format("reventless").option("store", self.store)
        return reader.option("topic", name).load()

    def __getitem__(self, name: str) -> DataFrame:
        if name not in self.names:
            raise StreamError(f"no topic {name!r} (topics: {', '.join(sorted(self.names))})")
        if name not in self._frames:
            self._frames[name] = self.reader(self.spark, name, self.start)
        return self._frames[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """One micro-batch of a streaming projection, as ``on_progress`` receives it.

    ``rows_in``: events the batch read; ``rows_out``: rows it upserted or deleted;
    ``late``: rows the stateful operators dropped behind the watermark (counted, also
    kept in ``rv_stream_batches.late``); ``lag``: per topic, events in the log past the
    stream's position; ``seconds``: the batch's duration."""

    name: str
    batch_id: int
    rows_in: int
    rows_out: int
    late: int
    lag: dict[str, int]
    seconds: float
    watermark: str | None = None
    positions: dict[Part, int] = field(default_factory=dict)


def store_url(app: App) -> str:
    """The URL of ``app``'s SQL store, with its password (it stays in this process)."""
    from ..store import require_sql

    store = require_sql(app.store, "a streaming projection")
    return store.db.url.render_as_string(hide_password=False)


_RELATION = re.compile(r"StreamingRelation")
_TOPIC = re.compile(r", reventless, .*?\[(?:[^\]]*?, )?topic=([^,\]]+)")


def source_topics(df: DataFrame) -> list[str | None]:
    """The topic of each streaming source of ``df``'s plan, in the order Spark's offset
    log lists the sources (the plan's leaves, depth first; None: not a ``reventless``
    source)."""
    plan = str(df._jdf.queryExecution().logical().toString())  # noqa: SLF001 - no public API
    out: list[str | None] = []
    for line in plan.splitlines():
        if _RELATION.search(line):
            found = _TOPIC.search(line)
            out.append(found.group(1) if found else None)
    return out


def read_positions(checkpoint: Path, batch_id: int, topics: list[str | None]) -> dict[Part, int]:
    """The log offsets batch ``batch_id`` reads up to, per topic partition, from Spark's
    offset log (written before the batch runs: one line per source, in ``topics``'
    order). The ``reventless`` source's offset is ``{"<partition>": <next offset>}``;
    other sources (files, rate) contribute nothing."""
    path = checkpoint / "offsets" / str(batch_id)
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()[2:]
    if len(lines) != len(topics):
        return {}
    out: dict[Part, int] = {}
    for topic, line in zip(topics, lines, strict=True):
        if topic is None:
            continue
        try:
            got = json.loads(line)
        except ValueError:
            continue
        if not isinstance(got, dict):
            continue
        for part, nxt in got.items():
            if str(part).isdigit() and isinstance(nxt, int):
                key = (topic, int(part))  # a topic read twice: done up to the lower one
                out[key] = min(out.get(key, nxt - 1), nxt - 1)
    return out


class StreamQuery:
    """A running streaming projection (``start_stream``): its Spark query, its sink and
    what it reported. ``stop()`` ends it (its last committed batch stays)."""

    def __init__(self, name: str, query: StreamingQuery, sink: SqlStreamSink | None) -> None:
        self.name, self.query, self.sink = name, query, sink
        self.progress: list[StreamProgress] = []
        self.changed = threading.Condition()
        #: The thread reporting progress (``streamrun``): ``stop`` waits for its last report.
        self.reporter: threading.Thread | None = None
        #: The run id of the checkpoint (``new_run``) and the last batch reported.
        self.run = ""
        self.reported = -1

    @property
    def id(self) -> str:
        """The Spark query id (stable across restarts from one checkpoint)."""
        return str(self.query.id)

    def state(self) -> StreamState | None:
        """What the store holds of this projection (batch id, positions, counters)."""
        return None if self.sink is None else self.sink.state_sync(self.name)

    def wait_until(
        self, done: Callable[[StreamQuery], bool], timeout: float = 120.0, poll: float = 0.2
    ) -> None:
        """Wait until ``done(self)`` holds (re-checked after each batch and every ``poll``
        seconds); raises the query's error if it failed, ``TimeoutError`` after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not done(self):
            self.raise_failure()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"stream {self.name}: condition not reached in {timeout}s "
                    f"(status {self.query.status}, last progress {self.query.lastProgress})"
                )
            with self.changed:
                self.changed.wait(min(poll, left))

    def wait_for_positions(self, heads: Mapping[Part, int], timeout: float = 120.0) -> None:
        """Wait until the committed position reaches ``heads`` (per topic partition)."""

        def reached(q: StreamQuery) -> bool:
            st = q.state()
            got = st.positions if st is not None else {}
            return all(got.get(p, 0) >= o for p, o in heads.items())

        self.wait_until(reached, timeout)

    def raise_failure(self) -> None:
        """Raise the error the query stopped with, as a reventless error where it is one."""
        exc = self.query.exception()
        if exc is not None:
            raise stream_error(exc)

    def stop(self) -> None:
        """Stop the query (after the report of its last committed batch) and raise its
        error if it failed."""
        st = self.state()
        if st is not None and st.run == self.run and self.query.isActive:
            # Spark forgets a stopped query's progress: report the last batch first
            with contextlib.suppress(TimeoutError, ReventlessError):
                self.wait_until(lambda q: self.reported >= st.batch_id, timeout=10)
        self.query.stop()
        if self.reporter is not None:
            self.reporter.join(timeout=30)
        self.raise_failure()

    def notify(self, p: StreamProgress) -> None:
        """Record ``p`` and wake waiters."""
        with self.changed:
            self.reported = max(self.reported, p.batch_id)
            self.progress.append(p)
            del self.progress[:-1000]
            self.changed.notify_all()


def stream_error(exc: BaseException) -> BaseException:
    """The reventless error inside a Spark error's text, or the error itself."""
    from ..errors import SchemaMismatchError, StreamFencedError, TopicNotFoundError
    from .fold import RebuildError

    text = str(exc)
    for cls in (StreamFencedError, StreamError, SchemaMismatchError, TopicNotFoundError):
        found = re.search(rf"\b{cls.__name__}: (.*)", text)
        if found:
            return cls(found.group(1).strip())
    found = re.search(r"\bResnapshotRequiredError: (.*)", text)
    if found:  # the log's offsets the stream needs were deleted by retention
        return StreamError(f"resnapshot required: {found.group(1).strip()}")
    found_rebuild = RebuildError.from_text(text)
    return found_rebuild if found_rebuild is not None else exc


def rows_of(model: ReadModel[Any], records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """SQL values of ``records`` (one dict per row, the row model's fields), validated
    by the row model: what does not fit is a ``StreamError``."""
    encode = row_schema(model).encoder(model.row.__name__)
    out = []
    for rec in records:
        try:
            out.append(tuple(encode(model.row.model_validate(rec))))
        except ValidationError as exc:
            raise StreamError(
                f"{model.name}: a pipeline row does not fit {model.row.__name__}: {exc}"
            ) from None
    return out


def check_columns(model: ReadModel[Any], df: DataFrame) -> None:
    """The pipeline's frame must have a column per field of the row model."""
    missing = [f for f in model.row.model_fields if f not in df.columns]
    if missing:
        raise StreamError(
            f"{model.name}: the pipeline's rows lack column(s) {', '.join(missing)} of "
            f"{model.row.__name__} (it has {', '.join(df.columns)})"
        )


def default_checkpoint(name: str) -> Path:
    """``<workdir>/streams/<name>``: where a projection's Spark checkpoint lives."""
    return default_workdir() / "streams" / table_name("", name)


def new_run(checkpoint: Path) -> str:
    """The run id of ``checkpoint`` (made on its first start, kept across restarts)."""
    path = checkpoint / "reventless-run.json"
    if path.is_file():
        return str(json.loads(path.read_text())["run"])
    checkpoint.mkdir(parents=True, exist_ok=True)
    run = uuid.uuid4().hex
    path.write_text(json.dumps({"run": run}))
    return run


def open_sink(model: ReadModel[Any], url: str) -> SqlStreamSink:
    """An opened sink on the store at ``url`` (tables created if missing)."""
    db = Database(url)
    db.open_sync()
    sink = SqlStreamSink(db, model)
    sink.open_sync()
    return sink


def batch_writer(
    model: ReadModel[Any],
    sink: SqlStreamSink,
    checkpoint: Path,
    run: str,
    start: Mapping[Part, int],
    handlers: bool,
    on_commit: Callable[[int, int, dict[Part, int]], None],
    topics: list[str | None],
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function: the batch's rows and position in one transaction."""
    key_at = sink.columns.index(model.key)

    def write(df: DataFrame, batch_id: int) -> None:
        positions = read_positions(checkpoint, batch_id, topics)
        table = df.toArrow()
        upserts: list[tuple[Any, ...]] = []
        deletes: list[Any] = []
        if handlers:
            import pickle

            keys = table.column("_key").to_pylist()
            vals = table.column("_vals").to_pylist()
            for k, v in zip(keys, vals, strict=True):
                if v is None:
                    deletes.append(pickle.loads(k))
                else:
                    upserts.append(pickle.loads(v))
        else:
            fields = list(model.row.model_fields)
            records = table.select(fields).to_pylist()
            upserts = rows_of(model, records)
            # two rows of one key in a batch (a window updated twice): the last one wins
            upserts = list({r[key_at]: r for r in upserts}.values())
        sink.commit_sync(StreamBatch(model.name, run, batch_id, positions, upserts, deletes, start))
        on_commit(batch_id, len(upserts) + len(deletes), positions)

    return write
