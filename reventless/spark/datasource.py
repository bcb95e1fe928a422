"""The log as a PySpark data source named ``reventless``: batch and streaming reads of one
topic by its offsets, in parallel, as Arrow batches.

``register(spark)`` (``rv.spark.session()`` does it) makes the source known to a session::

    df = (spark.read.format("reventless")
          .option("store", "sqlite:///shop.db").option("topic", "Order").load())
    stream = (spark.readStream.format("reventless")
              .option("store", url).option("topic", "Order")
              .option("maxEventsPerTrigger", 10_000).load())

The schema is the topic's Arrow schema as the store registered it (metadata columns
``_offset``, ``_type``, ``_partition``..., the fields, ``_tags`` on tagged topics), in its
Spark form (``arrow.py``). Options:

- ``store`` (URL) and ``topic``: required. SQLite stores are read from the file, so on a
  cluster every executor must see it; PostgreSQL is read with one connection per task.
- ``startingOffsets``: ``earliest`` (default: the first retained offset), ``latest``, one
  offset for every partition (``"1001"``) or ``{"<partition>": <next offset>}``.
- ``endingOffsets`` (batch): ``latest`` (default: the head when the query is planned),
  an offset or a JSON object, exclusive.
- ``maxEventsPerTrigger`` (stream): at most this many events per micro-batch.
- ``eventsPerPartition``: events per Spark task (default 250000); a topic with n
  partitions gets tasks per topic partition.
- ``where``: a reventless predicate (``"type = 'OrderPlaced' AND qty > 2"``) the store
  evaluates, for batch and stream; filters Spark pushes (batch) join it.
- ``opened``: ``true`` opens personal fields on the executors (the master key the source
  was registered with travels with the job); sealed text otherwise.

A stream's offsets are ``{"<partition>": <next offset>}`` in Spark's checkpoint, so a
restarted query resumes where it stopped. Retention that deleted offsets a read still
needs fails it with ``ResnapshotRequiredError``; a topic whose stored schema changes while
a stream runs (a new event version adding columns) fails it with ``SchemaMismatchError``:
restart the query (same checkpoint) to read on with the wider schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..errors import KeyringError, SchemaMismatchError
from ..predicate import Node, Predicate, filter_columns
from ..store.catalog import StoredTopic
from ..store.keys import MasterKey
from .arrow import spark_schema, to_spark
from .ds_filter import bounds_of, to_node
from .ds_log import LogReader
from .ds_plan import Offsets, SourceOptions, capped, check_retained, plan
from .keysource import KeySource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["NAME", "LogSource", "register"]

#: The format name: ``spark.read.format(NAME)``.
NAME = "reventless"


def struct_of(info: StoredTopic) -> StructType:
    """The Spark schema of a stored topic."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(spark_schema(info.schema.arrow_schema))


class _Scan:
    """What every task of one read needs (picklable): where, which topic at which schema,
    the predicate nodes, and the key source of an opened read."""

    def __init__(
        self, opts: SourceOptions, info: StoredTopic, nodes: list[Node], master: str | None
    ) -> None:
        self.url, self.topic = opts.store, opts.topic
        self.fingerprint = info.schema.fingerprint
        self.partitioned = info.partitions > 1
        self.per_task = opts.events_per_partition
        self.nodes = nodes
        self.master = master

    def tasks(self, starts: Offsets, ends: Offsets) -> list[InputPartition]:
        """The tasks reading ``starts`` up to ``ends`` (per partition), planned by
        partition and offset range within the pushed bounds."""
        ranges = plan(
            starts,
            ends,
            partitioned=self.partitioned,
            per_task=self.per_task,
            bounds=bounds_of(self.nodes),
        )
        job = uuid.uuid4().hex  # personal data keys are cached per planned batch, no longer
        return [InputPartition((p, lo, hi, job)) for p, lo, hi in ranges]

    def read(self, part: InputPartition) -> Iterator[pa.RecordBatch]:
        partition, lo, hi, job = part.value
        with LogReader(self.url) as log:
            info = log.topic(self.topic)
            _same_schema(info, self.fingerprint)
            schema = info.schema
            ring = None
            if self.master is not None and schema.personal:
                ring = KeySource(self.url, self.master, job).keyring()
            for rows in log.pages(info, lo, hi, partition=partition, where=self.nodes):
                batch = schema.to_arrow(rows)
                if ring is not None:
                    batch = ring.open_batch(schema, batch)
                yield to_spark(batch)


def _same_schema(info: StoredTopic, fingerprint: str) -> None:
    if info.schema.fingerprint != fingerprint:
        raise SchemaMismatchError(
            f"topic {info.name!r} changed its stored schema while being read (a new event "
            "version added columns): restart the query (with the same checkpoint) to read "
            "on with the new schema"
        )


def _where(opts: SourceOptions, info: StoredTopic) -> list[Node]:
    if opts.where is None:
        return []
    return [Predicate.parse(opts.where, info.schema).node]


class LogSource(DataSource):
    """The ``reventless`` data source (see the module docstring for its options)."""

    #: The master key text an opened read uses (set by ``register``).
    master_key: ClassVar[str | None] = None

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.opts = SourceOptions.parse(dict(options))

    @classmethod
    def name(cls) -> str:
        return NAME

    def _topic(self) -> StoredTopic:
        with LogReader(self.opts.store) as log:
            return log.topic(self.opts.topic)

    def schema(self) -> StructType:
        return struct_of(self._topic())

    def _scan(self, schema: StructType) -> tuple[_Scan, StoredTopic]:
        info = self._topic()
        if schema != struct_of(info):
            raise SchemaMismatchError(
                f"the schema Spark holds for topic {info.name!r} is not the store's: the "
                "topic's stored schema changed since the DataFrame was loaded (load it "
                "again), or .schema() was given (the source's schema is the topic's)"
            )
        master = None
        if self.opts.opened and info.schema.personal:
            master = self.master_key
            if master is None:
                if not MasterKey.configured():
                    raise KeyringError(
                        "option opened=true needs the master key: set REVENTLESS_MASTER_KEY "
                        "before rv.spark.register(spark), or pass register(master_key=...)"
                    )
                master = MasterKey.from_env().text
        return _Scan(self.opts, info, _where(self.opts, info), master), info

    def reader(self, schema: StructType) -> DataSourceReader:
        scan, info = self._scan(schema)
        return LogBatchReader(self.opts, scan, info)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        scan, info = self._scan(schema)
        return LogStreamReader(self.opts, scan, info)


class LogBatchReader(DataSourceReader):
    """A batch read of the topic's offsets (the head when planned), filters pushed down."""

    def __init__(self, opts: SourceOptions, scan: _Scan, info: StoredTopic) -> None:
        self.opts, self.scan = opts, scan
        self.parts = info.partitions
        self.columns = filter_columns(info.schema)
        self.where = list(scan.nodes)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        pushed: list[Node] = []
        for flt in filters:
            node = to_node(flt, self.columns)
            if node is None:
                yield flt
            else:
                pushed.append(node)
        self.scan.nodes = self.where + pushed

    def partitions(self) -> Sequence[InputPartition]:
        with LogReader(self.opts.store) as log:
            head, horizon = log.bounds(log.topic(self.opts.topic))
        starts = self.opts.starting(self.parts, head, horizon)
        ends = self.opts.ending(self.parts, head, horizon)
        check_retained(self.opts.topic, starts, head, horizon)
        return self.scan.tasks(starts, ends) or [InputPartition((None, 1, 0, ""))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.scan.read(partition)


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream of the topic by offsets: ``{"<partition>": <next offset>}``."""

    def __init__(self, opts: SourceOptions, scan: _Scan, info: StoredTopic) -> None:
        self.opts, self.scan = opts, scan
        self.parts = info.partitions
        self.target: int | None = None  # Trigger.AvailableNow: the head when it started
        self._log: LogReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_log"] = None  # the driver's connection stays on the driver
        return state

    def _bounds(self) -> tuple[int, int]:
        if self._log is None:
            self._log = LogReader(self.opts.store)
        info = self._log.topic(self.opts.topic, fresh=True)
        _same_schema(info, self.scan.fingerprint)
        return self._log.bounds(info)

    def initialOffset(self) -> Offsets:
        head, horizon = self._bounds()
        return self.opts.starting(self.parts, head, horizon)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_events_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._bounds()[0]

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        head, horizon = self._bounds()
        starts = {str(p): int(v) for p, v in start.items()}
        check_retained(self.opts.topic, starts, head, horizon)
        if self.target is not None:
            head = min(head, self.target)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return capped(starts, head, cap)

    def reportLatestOffset(self) -> Offsets:
        head, _ = self._bounds()
        return {str(p): head + 1 for p in range(self.parts)}

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        starts = {str(p): int(v) for p, v in start.items()}
        ends = {str(p): int(v) for p, v in end.items()}
        return self.scan.tasks(starts, ends)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.scan.read(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the log keeps every offset until retention."""

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def register(spark: SparkSession, *, master_key: MasterKey | str | None = None) -> None:
    """Make the ``reventless`` format known to ``spark`` (and turn on Spark's filter
    pushdown for Python sources, which it needs).

    ``master_key`` (default: ``REVENTLESS_MASTER_KEY`` / ``_FILE`` if set now) is what an
    ``opened`` read opens personal fields with: it is stored with the registration, so
    the executors need no configuration.

    Example::

        rv.spark.register(spark)
        spark.read.format("reventless").option("store", url).option("topic", "Order").load()
    """
    if master_key is None and MasterKey.configured():
        master_key = MasterKey.from_env()
    text = master_key.text if isinstance(master_key, MasterKey) else master_key
    source: type[LogSource] = LogSource
    if text is not None:
        # a class made here pickles by value, so the key travels with the registration
        source = type("KeyedLogSource", (LogSource,), {"master_key": text})
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(source)
