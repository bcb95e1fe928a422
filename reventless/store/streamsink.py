"""Where a streaming projection's micro-batches land: rows and position in one transaction.

A Spark Structured Streaming query (``reventless.spark.stream``) hands each micro-batch
to ``SqlStreamSink.commit_sync``, which in ONE transaction

1. reads the projection's row in ``rv_stream_batches`` (locked on PostgreSQL): a batch id
   at or below the one stored for the same run was committed already (Spark replays the
   last batch after a crash) and the call is a no-op;
2. checks the fence: the read model's checkpoints in ``rv_checkpoints`` must still be
   where this stream left them (a live collector that moved them would have applied
   events twice): else ``StreamFencedError`` and nothing lands;
3. upserts and deletes the batch's rows in the read model's table;
4. moves the checkpoints (per topic partition, the log offset the batch read up to) and
   records the batch id, its position and counters.

So a query killed anywhere and restarted from its Spark checkpoint neither loses nor
doubles a row, and the live collector can take the read model back from the stored
checkpoints. Example::

    sink = SqlStreamSink(db, revenue)                 # an opened Database, a ReadModel
    sink.open_sync()
    sink.commit_sync(StreamBatch("revenue", run, 7, {("Order", 0): 420}, rows, ()))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import StreamFencedError
from ..ids import now_us
from . import tables
from .database import Database
from .readmodel import RowModel, SqlReadModelTable

Part = tuple[str, int]  # (topic, partition)
Positions = Mapping[Part, int]

_meta = sa.MetaData()
#: One row per streaming projection: the run (an incarnation of its Spark checkpoint),
#: the last batch id committed, the log position it reached and counters.
stream_batches = sa.Table(
    "rv_stream_batches",
    _meta,
    sa.Column("query", sa.String(200), primary_key=True),
    sa.Column("run", sa.String(64), nullable=False),
    sa.Column("batch_id", sa.BigInteger, nullable=False),
    sa.Column("positions", sa.Text, nullable=False),
    sa.Column("rows", sa.BigInteger, nullable=False),
    sa.Column("late", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.BigInteger, nullable=False),
)


def dump_positions(positions: Positions) -> str:
    """``{"topic/partition": offset}`` JSON (sorted)."""
    return json.dumps({f"{t}/{p}": int(o) for (t, p), o in sorted(positions.items())})


def load_positions(text: str) -> dict[Part, int]:
    """The inverse of ``dump_positions``."""
    out: dict[Part, int] = {}
    for k, v in json.loads(text or "{}").items():
        topic, _, part = str(k).rpartition("/")
        out[topic, int(part)] = int(v)
    return out


@dataclass(frozen=True, slots=True)
class StreamState:
    """What the store holds of a streaming projection."""

    query: str
    run: str
    batch_id: int
    positions: dict[Part, int]
    rows: int
    late: int


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """One micro-batch to commit: ``upserts`` are SQL values in the table's column order,
    ``deletes`` keys; ``positions`` the log offsets read up to (per topic partition;
    empty for a source without log offsets); ``start`` the checkpoints the run began
    from (its first batch fences against them)."""

    query: str
    run: str
    batch_id: int
    positions: Positions
    upserts: Sequence[tuple[Any, ...]] = ()
    deletes: Sequence[Any] = ()
    start: Positions = field(default_factory=dict)
    late: int = 0


class SqlStreamSink:
    """The streaming side of a read model's table (see the module docstring)."""

    def __init__(self, db: Database, model: RowModel[Any]) -> None:
        self.db = db
        self.model = model

    @cached_property
    def table(self) -> SqlReadModelTable[Any]:
        """The read model's table (its statements need the opened database's dialect)."""
        return SqlReadModelTable(self.model, self.db)

    @property
    def columns(self) -> list[str]:
        """The table's columns, in the order ``StreamBatch.upserts`` gives values."""
        return list(self.table.columns)

    def open_sync(self) -> None:
        """Create the system tables, ``rv_stream_batches`` and the read model's table if
        missing."""

        def work(conn: Connection) -> None:
            self.db.create_sync(conn, tables.metadata)  # a store no App opened yet
            self.db.create_sync(conn, _meta)
            self.table.create_sync(conn)

        self.db.write_sync(work)

    def state_sync(self, query: str) -> StreamState | None:
        """The stored state of ``query`` (None before its first batch)."""

        def work(conn: Connection) -> StreamState | None:
            return self._state(conn, query, lock=False)

        return self.db.read_sync(work)

    def _state(self, conn: Connection, query: str, *, lock: bool) -> StreamState | None:
        sel = sa.select(stream_batches).where(stream_batches.c.query == query)
        if lock and not self.db.is_sqlite:
            sel = sel.with_for_update()
        row = conn.execute(sel).first()
        if row is None:
            return None
        return StreamState(
            row.query, row.run, row.batch_id, load_positions(row.positions), row.rows, row.late
        )

    def checkpoints_sync(self, conn: Connection) -> dict[Part, int]:
        """The read model's checkpoints (``rv_checkpoints`` of the component named like it)."""
        q, m = self.db.q, self.db.mark
        sql = (
            f"SELECT topic, {q('partition')}, {q('offset')} FROM rv_checkpoints "
            f"WHERE component = {m}"
        )
        return {
            (str(t), int(p)): int(o)
            for t, p, o in conn.exec_driver_sql(sql, (self.model.name,)).all()
        }

    def snapshot_sync(self) -> tuple[list[tuple[Any, ...]], dict[Part, int]]:
        """The table's rows (SQL values) and the read model's checkpoints, read in one
        transaction: the state a stream takes over a read model at."""

        def work(conn: Connection) -> tuple[list[tuple[Any, ...]], dict[Part, int]]:
            rows = [tuple(r) for r in conn.exec_driver_sql(self.table.select_sql).all()]
            return rows, self.checkpoints_sync(conn)

        return self.db.read_sync(work)

    def commit_sync(self, batch: StreamBatch) -> bool:
        """Commit ``batch`` (see the module docstring); False if it was committed before."""

        def work(conn: Connection) -> bool:
            self._ensure(conn, batch.query)
            state = self._state(conn, batch.query, lock=True)
            assert state is not None
            fresh = state.run != batch.run
            if not fresh and state.batch_id >= batch.batch_id:
                return False  # a replayed batch: it landed already
            expected = dict(batch.start) if fresh else state.positions
            self._fence(conn, expected, batch.positions)
            if batch.upserts:
                conn.exec_driver_sql(self.table.upsert_sql, list(batch.upserts))
            if batch.deletes:
                conn.exec_driver_sql(self.table.delete_sql, [(k,) for k in batch.deletes])
            self._advance(conn, batch.positions)
            moved = {**(expected if fresh else state.positions), **batch.positions}
            conn.execute(
                stream_batches.update()
                .where(stream_batches.c.query == batch.query)
                .values(
                    run=batch.run,
                    batch_id=batch.batch_id,
                    positions=dump_positions(moved),
                    rows=(0 if fresh else state.rows) + len(batch.upserts) + len(batch.deletes),
                    late=(0 if fresh else state.late) + batch.late,
                    updated_at=now_us(),
                )
            )
            return True

        return self.db.write_sync(work)

    def add_late_sync(self, query: str, late: int) -> None:
        """Add ``late`` rows dropped behind the watermark to the projection's counter."""
        if late <= 0:
            return
        sql = stream_batches.update().where(stream_batches.c.query == query)
        self.db.write_sync(
            lambda conn: conn.execute(sql.values(late=stream_batches.c.late + int(late)))
        )

    def lag_sync(self, positions: Positions) -> dict[str, int]:
        """Per topic, the events in the log past ``positions``."""
        return self.db.read_sync(lambda conn: lag_sync(self.db, conn, positions))

    def reset_sync(self, query: str) -> None:
        """Forget ``query``'s stored batches (its table and checkpoints stay)."""
        sql = stream_batches.delete().where(stream_batches.c.query == query)
        self.db.write_sync(lambda conn: conn.execute(sql))

    def _ensure(self, conn: Connection, query: str) -> None:
        """The query's row, if missing, with no run yet (its first batch is fresh)."""
        q = self.db.q
        conn.exec_driver_sql(
            f"INSERT INTO rv_stream_batches (query, run, batch_id, positions, {q('rows')}, late, "
            f"updated_at) VALUES ({self.db.placeholders(7)}) ON CONFLICT (query) DO NOTHING",
            (query, "", -1, "{}", 0, 0, now_us()),
        )

    def _fence(self, conn: Connection, expected: Positions, moving: Iterable[Part]) -> None:
        stored = self.checkpoints_sync(conn)
        for part in {*expected, *moving}:
            if stored.get(part, 0) != expected.get(part, 0):
                topic, partition = part
                raise StreamFencedError(
                    f"stream {self.model.name!r}: the checkpoint of topic {topic!r} partition "
                    f"{partition} is at {stored.get(part, 0)}, the stream left it at "
                    f"{expected.get(part, 0)}: another collector runs this read model; "
                    "nothing of the batch landed"
                )

    def _advance(self, conn: Connection, positions: Positions) -> None:
        if not positions:
            return
        q = self.db.q
        sql = (
            f"INSERT INTO rv_checkpoints (component, topic, {q('partition')}, {q('offset')}) "
            f"VALUES ({self.db.placeholders(4)}) "
            f"ON CONFLICT (component, topic, {q('partition')}) "
            f"DO UPDATE SET {q('offset')} = excluded.{q('offset')}"
        )
        name = self.model.name
        conn.exec_driver_sql(sql, [(name, t, p, int(o)) for (t, p), o in positions.items()])


def lag_sync(db: Database, conn: Connection, positions: Positions) -> dict[str, int]:
    """Per topic, the events in the log past ``positions`` (its partitions' offsets)."""
    tables = {
        str(n): str(t) for n, t in conn.exec_driver_sql("SELECT name, table_name FROM rv_topics")
    }
    out: dict[str, int] = {}
    m = db.mark
    for (topic, partition), offset in positions.items():
        table = tables.get(topic)
        if table is None:
            continue
        sql = f"SELECT COUNT(*) FROM {db.q(table)} WHERE _partition = {m} AND _offset > {m}"
        n = int(conn.exec_driver_sql(sql, (partition, int(offset))).scalar_one())
        out[topic] = out.get(topic, 0) + n
    return out
