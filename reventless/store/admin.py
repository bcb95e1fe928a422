"""What the ``reventless`` command reads from a store, without the application's code.

``StoreAdmin`` is the port: an overview of topics (with their head offsets) and of
collectors (checkpoint, lag, whether retention overtook them), a topic's events read back
through the Arrow schema stored with it, and the components that hold checkpoints. Each
method is one read transaction (a consistent snapshot), as the command always read it.
``wait_for_change`` is the store's own change signal, so ``reventless tail --follow``
sleeps between commits instead of polling hard.

Example::

    admin = await SqlStoreAdmin.open("sqlite:///shop.db")   # StoreError: no store there
    try:
        overview = await admin.overview()
        schema, rows = await admin.tail("Order", from_offset=1, limit=5)
    finally:
        await admin.close()
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_FIELDS, TopicSchema
from ..errors import StoreError
from .collector import CollectorStore, SqlCollectorStore
from .database import Database
from .keys import MasterKey
from .retention import collectors_behind_sync
from .schedules import ScheduleStore, SqlScheduleStore
from .sql import SqlEventStore

T = TypeVar("T")
Row = tuple[Any, ...]
#: Rows per page of ``StoreAdmin.scan`` (the Parquet export writes one batch per page).
SCAN_PAGE = 50_000


@dataclass(frozen=True, slots=True)
class TopicHead:
    """One registered topic: its kind, tenant pin, partition count, last offset, table."""

    name: str
    kind: str
    tenant: str | None
    partitions: int
    head: int
    table: str


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a collector's topic: its checkpoint, the partition's head offset
    and the gap between them."""

    partition: int
    checkpoint: int
    head: int
    lag: int


@dataclass(frozen=True, slots=True)
class CollectorLag:
    """One component on one topic: its highest checkpoint, the largest gap between a
    partition's head and its checkpoint, whether retention deleted events past a
    checkpoint (``resnapshot_required``), and each checkpointed partition's lag."""

    component: str
    topic: str
    checkpoint: int
    lag: int
    resnapshot_required: bool
    partitions: tuple[PartitionLag, ...] = ()


@dataclass(frozen=True, slots=True)
class StoreOverview:
    """Topics in name order; collectors in (component, topic) order."""

    topics: list[TopicHead]
    collectors: list[CollectorLag]


class StoreAdmin(Protocol):
    """The store as the command-line tool inspects it."""

    async def overview(self) -> StoreOverview:
        """Topics with their heads, and collectors with their checkpoints and lag."""
        ...

    async def shown(self, schema: pa.Schema, rows: list[Row]) -> list[Row]:
        """``rows`` with personal fields opened where a master key is configured."""
        ...

    async def tail(self, topic: str, from_offset: int, limit: int) -> tuple[pa.Schema, list[Row]]:
        """The topic's stored schema and up to ``limit`` rows from ``from_offset`` on, in
        offset order (columns in the schema's order); ``StoreError`` for an unknown topic."""
        ...

    async def scan(
        self,
        topic: str,
        from_offset: int,
        consume: Callable[[pa.Schema, Iterator[list[Row]]], T],
        page_size: int = SCAN_PAGE,
    ) -> T:
        """Call ``consume(schema, pages)`` with the topic's stored schema and its rows from
        ``from_offset`` on in pages, in one read transaction (``consume`` runs on the
        store's reader thread); returns what ``consume`` returns."""
        ...

    async def components(self) -> list[str]:
        """Names of the components that hold checkpoints, sorted."""
        ...

    @property
    def collectors(self) -> CollectorStore:
        """The collectors' checkpoints and dead letters."""
        ...

    @property
    def schedules(self) -> ScheduleStore:
        """Scheduled commands (pending and dead-lettered)."""
        ...

    @property
    def changes(self) -> int:
        """Commits signalled so far (see ``wait_for_change``)."""
        ...

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        """Wait for a commit after ``changes == seen``; False on timeout. Another process's
        commits wake it where the store can tell (PostgreSQL's NOTIFY); on SQLite only the
        timeout does, so a follower re-reads after each timeout."""
        ...


def _require_file(db: Database) -> None:
    path = db.url.database  # opening a missing SQLite file would create it
    if db.is_sqlite and not db.is_memory and path and not os.path.isfile(path):
        raise StoreError(f"no store at {path}: the file does not exist")


class SqlStoreAdmin:
    """``StoreAdmin`` on the SQL store (SQLite, PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._events = SqlEventStore(db)  # no I/O: only its change signal is used

    @classmethod
    async def open(cls, url: str) -> SqlStoreAdmin:
        """The store at ``url``, opened for inspection. ``StoreError`` (and nothing
        created) when ``url`` is malformed, the database cannot be reached, a SQLite file
        does not exist, or the database holds no reventless store."""
        db = Database(url)
        _require_file(db)
        await db.open()
        try:
            found = await db.read(lambda conn: sa.inspect(conn).has_table("rv_topics"))
            if not found:
                raise StoreError(f"{db.url.render_as_string()} holds no reventless store")
        except BaseException:
            await db.close()
            raise
        return cls(db)

    async def close(self) -> None:
        """Close the database."""
        await self.db.close()

    @property
    def changes(self) -> int:
        return self._events.changes

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        return await self._events.wait_for_change(timeout, seen)

    @property
    def collectors(self) -> CollectorStore:
        return SqlCollectorStore(self.db)

    @property
    def schedules(self) -> ScheduleStore:
        return SqlScheduleStore(self.db)

    async def overview(self) -> StoreOverview:
        return await self.db.read(self._overview_sync)

    def _overview_sync(self, conn: Connection) -> StoreOverview:
        rows = conn.exec_driver_sql(
            "SELECT name, kind, tenant, partitions, table_name FROM rv_topics ORDER BY name"
        ).all()
        heads: dict[tuple[str, int], int] = {}
        for name, _, _, _, table in rows:
            sql = f'SELECT _partition, MAX(_offset) FROM "{table}" GROUP BY _partition'
            heads.update({(name, int(p)): int(h) for p, h in conn.exec_driver_sql(sql).all()})
        topics = [
            TopicHead(
                n, k, t, parts, max((h for (tn, _), h in heads.items() if tn == n), default=0), tb
            )
            for n, k, t, parts, tb in rows
        ]
        lag: dict[tuple[str, str], list[int]] = {}
        parts: dict[tuple[str, str], list[PartitionLag]] = {}
        cps = conn.exec_driver_sql(
            'SELECT component, topic, "partition", "offset" FROM rv_checkpoints '
            'ORDER BY component, topic, "partition"'
        ).all()
        for c, t, p, o in cps:
            head = heads.get((t, int(p)), 0)
            entry = lag.setdefault((c, t), [0, 0])
            entry[0] = max(entry[0], int(o))
            entry[1] = max(entry[1], head - int(o))
            parts.setdefault((c, t), []).append(
                PartitionLag(int(p), int(o), head, max(0, head - int(o)))
            )
        stopped = {(b.component, b.topic) for b in collectors_behind_sync(self.db, conn, None)}
        collectors = [
            CollectorLag(c, t, cp, behind, (c, t) in stopped, tuple(parts[c, t]))
            for (c, t), (cp, behind) in lag.items()
        ]
        return StoreOverview(topics, collectors)

    def _schema_sync(self, conn: Connection, topic: str) -> tuple[str, pa.Schema]:
        row = conn.exec_driver_sql(
            f"SELECT table_name, arrow_schema FROM rv_topics WHERE name = {self.db.mark}",
            (topic,),
        ).first()
        if row is None:
            raise StoreError(f"no topic {topic!r} in this store")
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(row[1])))
        return str(row[0]), schema

    def _select(self, table: str, schema: pa.Schema, from_offset: int) -> str:
        cols = ", ".join(f'"{n}"' for n in schema.names)
        return f'SELECT {cols} FROM "{table}" WHERE _offset >= {int(from_offset)} ORDER BY _offset'

    async def shown(self, schema: pa.Schema, rows: list[Row]) -> list[Row]:
        """``rows`` (of ``tail``) with personal fields opened as text when a master key is
        configured (``"[erased]"`` once forgotten); without one they stay sealed."""
        fields = TopicSchema.from_arrow("tail", pa.schema(list(schema)[len(META_FIELDS) :]))
        if not fields.personal or not rows or not MasterKey.configured():
            return rows
        return await self._events.keyring.shown_rows(fields, rows)

    async def tail(self, topic: str, from_offset: int, limit: int) -> tuple[pa.Schema, list[Row]]:
        def work(conn: Connection) -> tuple[pa.Schema, list[Row]]:
            table, schema = self._schema_sync(conn, topic)
            sql = f"{self._select(table, schema, from_offset)} LIMIT {int(limit)}"
            return schema, [tuple(r) for r in conn.exec_driver_sql(sql).all()]

        return await self.db.read(work)

    async def scan(
        self,
        topic: str,
        from_offset: int,
        consume: Callable[[pa.Schema, Iterator[list[Row]]], T],
        page_size: int = SCAN_PAGE,
    ) -> T:
        def work(conn: Connection) -> T:
            table, schema = self._schema_sync(conn, topic)
            cur = conn.exec_driver_sql(self._select(table, schema, from_offset))

            def pages() -> Iterator[list[Row]]:
                while rows := cur.fetchmany(page_size):
                    yield [tuple(r) for r in rows]

            return consume(schema, pages())

        return await self.db.read(work)

    async def components(self) -> list[str]:
        sql = "SELECT DISTINCT component FROM rv_checkpoints ORDER BY component"
        return await self.db.read(lambda c: [str(r[0]) for r in c.exec_driver_sql(sql).all()])
