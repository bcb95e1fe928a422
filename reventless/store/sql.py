"""``SqlEventStore``: topics as append-only SQL tables with gapless per-topic offsets.

Offsets come from a counter row per topic (``rv_topics.head``) bumped inside the
appending transaction: a rolled-back append un-bumps it (no holes), and since the
row stays locked until commit, appends to one topic commit in offset order, so a
reader never sees offset N+1 before N.

Concurrent ``append`` calls are grouped: whatever queued while the previous commit
ran is written in the next single transaction (group commit), each request in its
own savepoint only if the optimistic all-at-once attempt hits a conflict.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_NAMES, META_SQL_KINDS, Column
from ..errors import ConcurrencyError, SchemaMismatchError, StoreError
from ..topic import TopicDef
from . import tables
from .database import Database, table_name

log = logging.getLogger("reventless.store")

#: A full stored row: META values (``codec.META_NAMES`` order) then the field values.
StoredRow = tuple[Any, ...]

_KIND_TYPES: dict[str, Callable[[], Any]] = {
    "int": sa.BigInteger,
    "float": sa.Double,
    "bool": sa.Boolean,
    "text": sa.Text,
    "blob": sa.LargeBinary,
    "json": sa.Text,
}
_MAX_GROUP = 2000


@dataclass(slots=True)
class AppendRequest:
    """Rows to append to one topic, without their ``_offset`` (assigned on commit).

    Each row is ``(_row_idx, _produced_at, _aggregate_id, ..., *fields)``: the META
    values after ``_offset`` followed by the field values.
    """

    topic: str
    rows: list[tuple[Any, ...]]
    aggregate_id: str | None = None
    expected_version: int | None = None
    command_id: str | None = None


@dataclass(slots=True)
class AppendResult:
    """Where an append landed. ``duplicate`` is True when its command id was seen before."""

    topic: str
    first_offset: int
    last_offset: int
    rows: list[StoredRow] = field(default_factory=list)
    duplicate: bool = False


@dataclass(slots=True)
class _TopicTable:
    topic: TopicDef
    table: str
    insert_sql: str
    select_sql: str


class SqlEventStore:
    """The EventStore on SQLAlchemy (SQLite file or memory, PostgreSQL).

    Example::

        db = Database("sqlite:///shop.db")
        store = SqlEventStore(db)
        await store.open()
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._topics: dict[str, _TopicTable] = {}
        self._pending: list[tuple[AppendRequest, asyncio.Future[AppendResult]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.commit_listeners: list[Callable[[list[AppendResult]], None]] = []
        #: Heads as far as this process has seen (its own commits, plus ``heads()`` reads).
        self.known_heads: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the database and create the system tables if missing."""
        await self.db.open()
        await self.db.write(lambda conn: tables.metadata.create_all(conn))

    async def close(self) -> None:
        """Wait for queued appends, then close the database."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)
        await self.db.close()

    # -- topics ----------------------------------------------------------------------------

    def _table_for(self, topic: TopicDef) -> sa.Table:
        md = sa.MetaData()
        name = table_name("ev_", topic.name)
        cols: list[sa.Column[Any]] = []
        for meta_name, kind in zip(META_NAMES, META_SQL_KINDS, strict=True):
            nullable = meta_name not in (
                "_offset",
                "_row_idx",
                "_produced_at",
                "_type",
                "_schema_version",
                "_msg_id",
            )
            col_type = _KIND_TYPES[kind]()
            if meta_name == "_offset":  # on SQLite: the rowid itself, no second index
                col_type = col_type.with_variant(sa.Integer(), "sqlite")
            cols.append(
                sa.Column(
                    meta_name,
                    col_type,
                    primary_key=meta_name == "_offset",
                    autoincrement=False,
                    nullable=nullable,
                )
            )
        cols.extend(self._field_column(c) for c in topic.schema.columns)
        return sa.Table(
            name,
            md,
            *cols,
            sa.UniqueConstraint("_aggregate_id", "_version", name=f"uq_{name}_version"),
        )

    @staticmethod
    def _field_column(c: Column) -> sa.Column[Any]:
        return sa.Column(c.name, _KIND_TYPES[c.sql_kind](), nullable=c.nullable)

    def _remember(self, topic: TopicDef, table: str) -> None:
        q = self.db.q
        names = [*META_NAMES, *(c.name for c in topic.schema.columns)]
        col_list = ", ".join(q(n) for n in names)
        self._topics[topic.name] = _TopicTable(
            topic=topic,
            table=table,
            insert_sql=(
                f"INSERT INTO {q(table)} ({col_list}) VALUES ({self.db.placeholders(len(names))})"
            ),
            select_sql=f"SELECT {col_list} FROM {q(table)}",
        )

    async def register(self, topic: TopicDef) -> bool:
        """Create (or check) the topic's table and registry row in one transaction.

        Returns True if the topic was created by this call. A stored topic with a
        different schema is upgraded only by adding nullable columns; anything else
        raises ``SchemaMismatchError`` and changes nothing.
        """
        table = self._table_for(topic)
        schema = topic.schema
        encoded = base64.b64encode(schema.arrow_schema.serialize().to_pybytes()).decode()

        def work(conn: Connection) -> bool:
            row = conn.execute(
                sa.select(tables.topics).where(tables.topics.c.name == topic.name)
            ).first()
            if row is None:
                table.create(conn)
                conn.execute(
                    tables.topics.insert().values(
                        name=topic.name,
                        table_name=table.name,
                        kind=topic.kind,
                        fingerprint=schema.fingerprint,
                        arrow_schema=encoded,
                        tenant=topic.tenant,
                        head=0,
                        created_at=time.time_ns() // 1000,
                    )
                )
                return True
            if row.tenant != topic.tenant:
                raise SchemaMismatchError(
                    f"topic {topic.name!r} is stored pinned to tenant {row.tenant!r}, "
                    f"declared with {topic.tenant!r}"
                )
            if row.fingerprint != schema.fingerprint:
                self._evolve(conn, topic, row.table_name)
                conn.execute(
                    tables.topics.update()
                    .where(tables.topics.c.name == topic.name)
                    .values(fingerprint=schema.fingerprint, arrow_schema=encoded)
                )
            return False

        try:
            created = await self.db.write(work)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot create topic {topic.name!r}: {exc}") from exc
        self._remember(topic, table.name)
        return created

    def _evolve(self, conn: Connection, topic: TopicDef, table: str) -> None:
        existing = {c["name"]: c for c in sa.inspect(conn).get_columns(table)}
        for c in topic.schema.columns:
            have = existing.get(c.name)
            if have is None:
                if not c.nullable:
                    raise SchemaMismatchError(
                        f"topic {topic.name!r}: new column {c.name!r} must be nullable"
                    )
                col_type = _KIND_TYPES[c.sql_kind]().compile(dialect=conn.dialect)
                conn.exec_driver_sql(
                    f"ALTER TABLE {self.db.q(table)} ADD COLUMN {self.db.q(c.name)} {col_type}"
                )
                continue
            want = _KIND_TYPES[c.sql_kind]()
            if have["type"]._type_affinity is not want._type_affinity:
                raise SchemaMismatchError(
                    f"topic {topic.name!r}: column {c.name!r} is stored as {have['type']}, "
                    f"the spec now says {c.sql_kind}"
                )
        declared = {c.name for c in topic.schema.columns} | set(META_NAMES)
        dropped = sorted(set(existing) - declared)
        if dropped:
            raise SchemaMismatchError(
                f"topic {topic.name!r}: stored columns {dropped} are missing from the spec "
                "(columns can be added, never removed)"
            )

    async def unregister(self, topic_name: str) -> None:
        """Drop a topic's table and registry row (used to undo a failed build)."""
        t = self._topics.pop(topic_name, None)
        if t is None:
            return

        def work(conn: Connection) -> None:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.db.q(t.table)}")
            conn.execute(tables.topics.delete().where(tables.topics.c.name == topic_name))

        await self.db.write(work)

    def topic(self, name: str) -> TopicDef:
        """The registered definition of ``name``."""
        return self._entry(name).topic

    def _entry(self, name: str) -> _TopicTable:
        try:
            return self._topics[name]
        except KeyError:
            raise StoreError(f"topic {name!r} is not registered with this store") from None

    def table_of(self, name: str) -> str:
        """The SQL table backing topic ``name``."""
        return self._entry(name).table

    # -- appending -------------------------------------------------------------------------

    async def append(self, request: AppendRequest) -> AppendResult:
        """Queue ``request`` for the next group commit and wait for its outcome."""
        self._entry(request.topic)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[AppendResult] = loop.create_future()
        self._pending.append((request, fut))
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[:_MAX_GROUP]
                del self._pending[:_MAX_GROUP]
                reqs = [r for r, _ in batch]
                work = partial(self._append_group, reqs=reqs)
                try:
                    if len(batch) == 1 and self.db.try_inline_write():
                        outcomes = self.db.write_raw_sync(work, locked=True)
                    else:
                        outcomes = await self.db.write_raw(work)
                except BaseException as exc:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                done: list[AppendResult] = []
                for (_, fut), out in zip(batch, outcomes, strict=True):
                    if isinstance(out, AppendResult):
                        if not out.duplicate:
                            done.append(out)
                            if out.last_offset > self.known_heads.get(out.topic, 0):
                                self.known_heads[out.topic] = out.last_offset
                        fut.set_result(out)
                    else:
                        fut.set_exception(out)
                for listener in self.commit_listeners:
                    try:
                        listener(done)
                    except Exception:  # a listener must never fail a commit
                        log.exception("commit listener failed")
        finally:
            self._drainer = None

    def _append_group(
        self, cur: Any, *, reqs: list[AppendRequest]
    ) -> list[AppendResult | Exception]:
        # The hot path talks to the DBAPI cursor directly: SQLAlchemy's per-statement
        # bookkeeping (and its compiled SAVEPOINT clauses) cost more than the SQL here.
        if len(reqs) == 1:
            return [self._careful(cur, reqs[0], savepoint=False)]
        cur.execute("SAVEPOINT rv_group")
        try:
            results: list[AppendResult | Exception] = list(self._append_all(cur, reqs))
        except self.db.integrity_errors:
            cur.execute("ROLLBACK TO SAVEPOINT rv_group")
            results = [self._careful(cur, r, savepoint=True) for r in reqs]
        cur.execute("RELEASE SAVEPOINT rv_group")
        return results

    def _careful(
        self, cur: Any, req: AppendRequest, *, savepoint: bool
    ) -> AppendResult | Exception:
        """One request on its own; a clash undoes only this request."""
        if savepoint:
            cur.execute("SAVEPOINT rv_one")
        try:
            result: AppendResult | Exception = self._append_one(cur, req)
        except ConcurrencyError as exc:
            if not savepoint:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT rv_one")
            result = exc
        if savepoint:
            cur.execute("RELEASE SAVEPOINT rv_one")
        return result

    def _bump(self, cur: Any, topic: str, n: int) -> int:
        """Reserve ``n`` offsets inside the appending transaction; returns the first.

        SQLite serialises writers (BEGIN IMMEDIATE), so the next offset is simply the
        largest one plus one (``_offset`` is the rowid: an O(log n) lookup, and no extra
        page to write). Other databases bump the topic's counter row, whose row lock
        orders concurrent appenders. Retention must therefore never delete a topic's
        newest row.
        """
        if self.db.is_sqlite:
            cur.execute(f"SELECT MAX(_offset) FROM {self.db.q(self._entry(topic).table)}")
            return int(cur.fetchone()[0] or 0) + 1
        mark = self.db.mark
        cur.execute(
            f"UPDATE rv_topics SET head = head + {mark} WHERE name = {mark} RETURNING head",
            (n, topic),
        )
        return int(cur.fetchone()[0]) - n + 1

    def _command_sql(self) -> str:
        return (
            "INSERT INTO rv_commands (command_id, topic, aggregate_id) "
            f"VALUES ({self.db.placeholders(3)})"
        )

    def _append_one(self, cur: Any, req: AppendRequest) -> AppendResult:
        if req.command_id is not None:
            cur.execute("SAVEPOINT rv_cmd")
            try:
                cur.execute(self._command_sql(), (req.command_id, req.topic, req.aggregate_id))
            except self.db.integrity_errors:
                cur.execute("ROLLBACK TO SAVEPOINT rv_cmd")
                cur.execute("RELEASE SAVEPOINT rv_cmd")
                return AppendResult(req.topic, 0, -1, duplicate=True)
            cur.execute("RELEASE SAVEPOINT rv_cmd")
        entry = self._entry(req.topic)
        first = self._bump(cur, req.topic, len(req.rows))
        rows = [(first + i, *r) for i, r in enumerate(req.rows)]
        try:
            cur.executemany(entry.insert_sql, rows)
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        return AppendResult(req.topic, first, first + len(rows) - 1, rows)

    def _append_all(self, cur: Any, reqs: list[AppendRequest]) -> list[AppendResult]:
        """Everything at once: one counter bump and one executemany per topic."""
        commands = [(r.command_id, r.topic, r.aggregate_id) for r in reqs if r.command_id]
        if commands:
            cur.executemany(self._command_sql(), commands)
        by_topic: dict[str, list[int]] = {}
        for i, req in enumerate(reqs):
            by_topic.setdefault(req.topic, []).append(i)
        results: list[AppendResult | None] = [None] * len(reqs)
        for topic, idxs in by_topic.items():
            entry = self._entry(topic)
            total = sum(len(reqs[i].rows) for i in idxs)
            off = self._bump(cur, topic, total)
            all_rows: list[StoredRow] = []
            for i in idxs:
                req = reqs[i]
                rows = [(off + k, *r) for k, r in enumerate(req.rows)]
                results[i] = AppendResult(topic, off, off + len(rows) - 1, rows)
                off += len(rows)
                all_rows.extend(rows)
            cur.executemany(entry.insert_sql, all_rows)
        return [r for r in results if r is not None]

    # -- reading ---------------------------------------------------------------------------

    async def read(
        self, topic: str, from_offset: int, limit: int, *, upto: int | None = None
    ) -> list[StoredRow]:
        """Rows with ``from_offset <= _offset [<= upto]`` in offset order, at most ``limit``."""
        entry = self._entry(topic)
        mark = self.db.mark
        sql = f"{entry.select_sql} WHERE _offset >= {mark}"
        params: tuple[Any, ...] = (from_offset,)
        if upto is not None:
            sql += f" AND _offset <= {mark}"
            params += (upto,)
        sql += f" ORDER BY _offset LIMIT {int(limit)}"
        return await self.db.read(lambda conn: _fetch(conn, sql, params))

    async def read_stream(
        self, topic: str, aggregate_id: str, after_version: int
    ) -> list[StoredRow]:
        """One aggregate's rows with ``_version > after_version`` in version order."""
        entry = self._entry(topic)
        mark = self.db.mark
        sql = (
            f"{entry.select_sql} WHERE _aggregate_id = {mark} AND _version > {mark} "
            "ORDER BY _version"
        )
        return await self.db.read(lambda conn: _fetch(conn, sql, (aggregate_id, after_version)))

    async def load(
        self, topic: str, aggregate_id: str
    ) -> tuple[tuple[int, str, str] | None, list[StoredRow]]:
        """The aggregate's snapshot ``(version, fingerprint, state)`` and the rows after it."""
        entry = self._entry(topic)
        mark = self.db.mark
        snap_sql = (
            "SELECT version, fingerprint, state FROM rv_snapshots "
            f"WHERE topic = {mark} AND aggregate_id = {mark}"
        )
        sql = (
            f"{entry.select_sql} WHERE _aggregate_id = {mark} AND _version > {mark} "
            "ORDER BY _version"
        )

        def work(conn: Connection) -> tuple[tuple[int, str, str] | None, list[StoredRow]]:
            cur = raw_cursor(conn)
            cur.execute(snap_sql, (topic, aggregate_id))
            snap = cur.fetchone()
            after = 0 if snap is None else int(snap[0])
            rows = _fetch(conn, sql, (aggregate_id, after))
            return (None if snap is None else (int(snap[0]), snap[1], snap[2])), rows

        return await self.db.read(work)

    async def save_snapshot(
        self, topic: str, aggregate_id: str, version: int, fingerprint: str, state: str
    ) -> None:
        """Store the aggregate's state at ``version`` (replacing an older snapshot)."""
        sql = (
            "INSERT INTO rv_snapshots (topic, aggregate_id, version, fingerprint, state) "
            f"VALUES ({self.db.placeholders(5)}) ON CONFLICT (topic, aggregate_id) DO UPDATE "
            "SET version = excluded.version, fingerprint = excluded.fingerprint, "
            f"state = excluded.state WHERE rv_snapshots.version < excluded.version"
        )
        await self.db.write(
            lambda conn: conn.exec_driver_sql(
                sql, (topic, aggregate_id, version, fingerprint, state)
            )
        )

    async def head(self, topic: str) -> int:
        """The last committed offset of ``topic`` (0 when empty)."""
        heads = await self.heads()
        if topic not in heads:
            raise StoreError(f"topic {topic!r} does not exist")
        return heads[topic]

    async def heads(self) -> dict[str, int]:
        """Head offsets of every topic in the store."""
        heads = await self.db.read(lambda conn: heads_sync(self.db, conn))
        for topic, head in heads.items():
            if head > self.known_heads.get(topic, 0):
                self.known_heads[topic] = head
        return heads


def heads_sync(db: Database, conn: Connection) -> dict[str, int]:
    """Head offset per topic, read inside the caller's transaction."""
    topics = conn.exec_driver_sql("SELECT name, table_name, head FROM rv_topics").all()
    if not db.is_sqlite:
        return {str(n): int(h) for n, _, h in topics}
    if not topics:
        return {}
    sql = " UNION ALL ".join(
        f"SELECT {db.mark}, MAX(_offset) FROM {db.q(str(t))}" for _, t, _ in topics
    )
    return {
        str(n): int(h or 0)
        for n, h in conn.exec_driver_sql(sql, tuple(str(n) for n, _, _ in topics)).all()
    }


def raw_cursor(conn: Connection) -> Any:
    """The DBAPI cursor of a SQLAlchemy connection (for the hot paths)."""
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


def _fetch(conn: Connection, sql: str, params: Sequence[Any]) -> list[StoredRow]:
    cur = raw_cursor(conn)
    cur.execute(sql, tuple(params))
    return [tuple(r) for r in cur.fetchall()]
