"""``SqlEventStore``: topics as append-only SQL tables with gapless per-topic offsets.

Offsets are reserved inside the appending transaction (see ``append.py``), so a rolled
back append leaves no hole and appends to one topic commit in offset order.

Concurrent ``append`` calls are grouped: whatever queued while the previous commit
ran is written in the next single transaction (group commit), each request in its
own savepoint only if the optimistic all-at-once attempt hits a conflict.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import (
    AGGREGATE_AT,
    META_NAMES,
    META_SQL_KINDS,
    MSG_ID_AT,
    OFFSET_AT,
    ROW_IDX_AT,
    TYPE_AT,
    VERSION_AT,
)
from ..errors import SchemaMismatchError, StoreError
from ..ids import now_us
from ..tags import Query
from ..topicdef import TopicDef
from . import tables
from .append import (
    NOTIFY_CHANNEL,
    Appender,
    AppendRequest,
    AppendResult,
    CommandRecord,
    StoredRow,
    TableInfo,
    snapshot_sql,
)
from .arrowread import (
    FOLDABLE,
    LEARN_AT,
    ArrowPages,
    Fold,
    constants,
    folded_select,
    unfold,
)
from .collector import SqlCollectorStore
from .commands import CommandLookup
from .database import Database, loop_is_alone
from .dcb import DcbAppends, dcb_log, guarded, read_query
from .ddl import PG_TYPES, evolve, topic_table
from .keys import Keyring, SqlKeyStore
from .leases import SqlLeaseStore
from .readmodel import RowModel, SqlReadModelTable
from .relay import SqlRelayPositions
from .retention import SqlRetentionStore
from .schedules import SCHEDULES_CHANNEL, SCHEDULES_PAYLOAD, SqlScheduleStore
from .signal import ChangeSignal
from .tagindex import TagIndex, create_tag_index, drop_tag_index

if TYPE_CHECKING:
    from .pgasync import AsyncAppender
from .stream import cursor_pages, keyset_pages

log = logging.getLogger("reventless.store")


_MAX_GROUP = 2000
#: The most rows a group commit may hold to be written on the loop's thread (see
#: ``_inline_group``): at ``FULL``, about a millisecond of the loop's time.
_INLINE_ROWS = 256
#: Inline appends in a row (no turn of the event loop between) before one yields.
_INLINE_RUN = 16
#: A group commit stops taking requests once it holds this many rows, so a burst of
#: large appends commits (and reaches the relay and the broker) in steps, not at once.
_MAX_GROUP_ROWS = 10_000
#: Aggregates per query of ``load_many`` (well under SQLite's bound parameters).
_LOAD_CHUNK = 500
#: The same on PostgreSQL, where the ids go as one array parameter (``member_of``).
_LOAD_CHUNK_PG = 5000


@dataclass(slots=True)
class _TopicTable:
    topic: TopicDef
    info: TableInfo
    select_sql: str
    #: PostgreSQL's ``load`` in one statement (``_load_sql``); None on SQLite.
    load_sql: str | None = None
    #: PostgreSQL's ``load_many`` of a chunk of ids in one statement (``_load_many_sql``).
    load_many_sql: str | None = None

    @property
    def table(self) -> str:
        return self.info.table


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
        #: Per topic: the ``FOLDABLE`` columns a long page read whole held one value in
        #: and no page since broke (read as one flag: see ``_columns``), and those
        #: already learned from a page (never learned again once broken).
        self._folds: dict[str, dict[str, Fold]] = {}
        self._checked: dict[str, set[str]] = {}
        #: Appends waiting for a group commit, in order: runs of requests (one for an
        #: ``append``, an ``append_many``'s whole), where their outcomes go, their rows.
        self._pending: deque[tuple[list[AppendRequest], _Sink, int]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        #: Appends committed inline since the loop last took a turn (see ``append``).
        self._inline_run = 0
        self.commit_listeners: list[Callable[[list[AppendResult]], None]] = []
        #: Heads as far as this process has seen (its own commits, plus ``heads()`` reads).
        self.known_heads: dict[str, int] = {}
        self._appender = Appender(db, lambda topic: self._entry(topic).info)
        self._async: AsyncAppender | None = None
        #: PostgreSQL's command-id lookups and loads (``CommandLookup.read_rows``).
        self._looker: AsyncAppender | None = None
        #: PostgreSQL's checkpoint-only collector commits (``SqlCollectorStore.lean_write``).
        self._committer: AsyncAppender | None = None
        #: Conditional appends and appends to DCB logs (``dcb.py``).
        self._dcb = DcbAppends(db, lambda topic: self._entry(topic).info, self._appender, None)
        #: Commits signalled so far (own appends, NOTIFYs): see ``wait_for_change``.
        self._changes = ChangeSignal()
        self._commands = CommandLookup(db)
        #: Collector state: checkpoints, dead letters, batch commits (``collector.py``).
        #: Scheduled commands (``schedules.py``); their writes wake ``schedules.wait_for_change``.
        self.schedules = SqlScheduleStore(db, listen=self._listen_schedules)
        self.collectors = SqlCollectorStore(db, on_schedules=self.schedules.signal)
        #: Leases of leased collector groups (``leases.py``).
        self.leases = SqlLeaseStore(db)
        #: Retention policies and horizons (``retention.py``): collectors check theirs.
        self.retention = SqlRetentionStore(db)
        #: The outbox relay's positions (``relay.py``).
        self.relay_positions = SqlRelayPositions(db, partial(heads_sync, db))
        self._keyring: Keyring | None = None
        #: Pages read straight into Arrow where an ADBC driver is installed (``arrowread``).
        self._arrow = ArrowPages(db)

    @property
    def keyring(self) -> Keyring:
        """Seals and opens personal fields (``keys.py``). By default the subjects' keys
        live in ``rv_keys`` under the master key from the environment (``KeyringError``
        when a key is first sealed or opened without one); assign a ``Keyring`` to use
        another key store."""
        if self._keyring is None:
            self._keyring = Keyring(SqlKeyStore(self.db))
        return self._keyring

    @keyring.setter
    def keyring(self, keyring: Keyring) -> None:
        self._keyring = keyring

    def read_model(self, model: RowModel[Any]) -> SqlReadModelTable[Any]:
        """The table of read model ``model`` (``rm_<name>``)."""
        return SqlReadModelTable(model, self.db)

    @property
    def dialect(self) -> str:
        """The SQL dialect's name (``sqlite`` or ``postgresql``): what predicates compile to."""
        return "sqlite" if self.db.is_sqlite else "postgresql"

    @property
    def arrow_rows(self) -> bool:
        """True where the Arrow helper processes can read pages (a SQLite file, or
        PostgreSQL, with the ``arrow`` extra): they read a page beside this process, which
        then only turns it into rows (~1 us a row, against ~3 us to read the rows itself
        on SQLite, ~2 us of psycopg's on PostgreSQL)."""
        return self._arrow.available

    # -- lifecycle -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the database and create the system tables if missing."""
        await self.db.open()
        self._arrow = ArrowPages(self.db)
        await self.db.write(self._create_tables)
        if not self.db.is_sqlite:  # appends talk to PostgreSQL from the event loop
            from .pgasync import AsyncAppender

            def appender(*session: str) -> AsyncAppender:
                return AsyncAppender(
                    self.db, lambda topic: self._entry(topic).info, self.db.url, session
                )

            self._async = appender()
            # command ids are looked up, and aggregates loaded, on a connection of their
            # own from the event loop (through libpq). Its statements look keys up: index
            # lookups whatever the tables' statistics say (a table that grew since
            # autovacuum last analyzed it, after a bulk load or in a new store, looks
            # small to the planner, which would then scan it whole for a batch of ids).
            self._looker = appender("SET enable_seqscan = off")
            self._commands.read_rows = self._looker.read_typed
            # collectors' checkpoint-only commits, from the event loop on a connection of
            # their own (opened at the first): a catch-up handles its next page meanwhile
            self._committer = appender()
            self.collectors.lean_write = self._committer.write_first_column
            self._dcb = DcbAppends(
                self.db, lambda topic: self._entry(topic).info, self._appender, appender
            )

    def _create_tables(self, conn: Connection) -> None:
        self.db.create_sync(conn, tables.metadata)
        tables.upgrade_sync(conn)

    def _on_notify(self, payload: str) -> None:
        topic, _, head = payload.rpartition(":")
        if head.isdigit() and int(head) > self.known_heads.get(topic, 0):
            self.known_heads[topic] = int(head)
        elif payload == SCHEDULES_PAYLOAD:
            self.schedules.signal()
        self._signal()

    def _listen(self) -> None:
        self.db.listen(NOTIFY_CHANNEL, self._on_notify)

    def _listen_schedules(self) -> None:
        self.db.listen(SCHEDULES_CHANNEL, self._on_schedules)

    def _on_schedules(self, _payload: str) -> None:
        self.schedules.signal()

    @property
    def changes(self) -> int:
        """Commits signalled so far (this process's, and NOTIFYs heard)."""
        return self._changes.count

    def _signal(self) -> None:
        self._changes.fire()

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        """Wait until something is committed (this process, or any process on PostgreSQL,
        via LISTEN/NOTIFY) after the caller saw ``changes == seen``; False on timeout. A
        change between two waits is not lost: ``changes`` has moved on, so the next wait
        returns at once."""
        # Only processes that wait (collectors) listen: a writer-only process would
        # otherwise be woken by every commit's NOTIFY, its own included.
        self._listen()
        return await self._changes.wait(timeout, seen)

    async def close(self) -> None:
        """Wait for queued appends, then close the database."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)
        if self._async is not None:
            await self._async.close()
            self._async = None
        if self._looker is not None:
            self._commands.read_rows = None
            await self._looker.close()
            self._looker = None
        if self._committer is not None:
            self.collectors.lean_write = None
            await self._committer.close()
            self._committer = None
        await self._dcb.close()
        await asyncio.to_thread(self._arrow.close)  # (waits for helper processes to exit)
        await self.db.close()

    # -- topics ----------------------------------------------------------------------------

    def _remember(self, topic: TopicDef, table: str, rowid_offset: bool = False) -> None:
        q = self.db.q
        names = [*META_NAMES, *(c.name for c in topic.schema.columns)]
        col_list = ", ".join(q(n) for n in names)
        kinds = [*META_SQL_KINDS, *(c.sql_kind for c in topic.schema.columns)]
        info = TableInfo(
            table=table,
            columns=tuple(names),
            pg_types=tuple(PG_TYPES[k] for k in kinds),
            insert_sql=(
                f"INSERT INTO {q(table)} ({col_list}) VALUES ({self.db.placeholders(len(names))})"
            ),
            tags=TagIndex.of(self.db, topic, table),
            rowid_offset=rowid_offset,
        )
        self._topics[topic.name] = _TopicTable(
            topic=topic,
            info=info,
            select_sql=f"SELECT {col_list} FROM {q(table)}",
            load_sql=None if self.db.is_sqlite else _load_sql(q, table, names),
            load_many_sql=None if self.db.is_sqlite else _load_many_sql(q, table, names),
        )

    async def register(self, topic: TopicDef) -> bool:
        """Create (or check) the topic's table and registry row in one transaction.

        Returns True if the topic was created by this call. A stored topic with a
        different schema is upgraded only by adding nullable columns; anything else
        raises ``SchemaMismatchError`` and changes nothing.
        """
        table = topic_table(topic)
        schema = topic.schema
        encoded = base64.b64encode(schema.arrow_schema.serialize().to_pybytes()).decode()

        def work(conn: Connection) -> tuple[bool, bool]:
            created = created_or_checked(conn)
            return created, self.db.is_sqlite and _offset_is_rowid(conn, table.name)

        def created_or_checked(conn: Connection) -> bool:
            self.db.serialize_ddl(conn)
            row = conn.execute(
                sa.select(tables.topics).where(tables.topics.c.name == topic.name)
            ).first()
            if row is None:
                table.create(conn)
                create_tag_index(self.db, conn, topic, table.name)
                conn.execute(
                    tables.topics.insert().values(
                        name=topic.name,
                        table_name=table.name,
                        kind=topic.kind,
                        fingerprint=schema.fingerprint,
                        arrow_schema=encoded,
                        tenant=topic.tenant,
                        partitions=topic.partitions,
                        head=0,
                        created_at=now_us(),
                    )
                )
                return True
            if row.partitions != topic.partitions:
                raise SchemaMismatchError(
                    f"topic {topic.name!r} was created with {row.partitions} partitions, "
                    f"declared with {topic.partitions} (the count is fixed)"
                )
            if row.tenant != topic.tenant:
                raise SchemaMismatchError(
                    f"topic {topic.name!r} is stored pinned to tenant {row.tenant!r}, "
                    f"declared with {topic.tenant!r}"
                )
            # (a stored Arrow schema that differs: metadata columns added since, _trace)
            if row.fingerprint != schema.fingerprint or row.arrow_schema != encoded:
                evolve(self.db, conn, topic, row.table_name)
                create_tag_index(self.db, conn, topic, row.table_name)
                conn.execute(
                    tables.topics.update()
                    .where(tables.topics.c.name == topic.name)
                    .values(fingerprint=schema.fingerprint, arrow_schema=encoded)
                )
            return False

        try:
            # (a stored topic that gains tags gets an index over the rows it holds)
            created, rowid = await self.db.write(work, sorts=True)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot create topic {topic.name!r}: {exc}") from exc
        self._remember(topic, table.name, rowid)
        return created

    async def unregister(self, topic_name: str) -> None:
        """Drop a topic's table and registry row (used to undo a failed build)."""
        t = self._topics.pop(topic_name, None)
        if t is None:
            return

        def work(conn: Connection) -> None:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.db.q(t.table)}")
            drop_tag_index(self.db, conn, topic_name)
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
        """Queue ``request`` for the next group commit and wait for its outcome.

        A request with a condition, or to a DCB log, is its own transaction (``dcb.py``):
        ``AppendConditionError`` when the condition fails (nothing lands)."""
        entry = self._entry(request.topic)
        if guarded(request, entry.info):
            landed = await self._dcb.append(request)
            self._settle_one(request, landed)
            return landed
        if self._inline_run >= _INLINE_RUN:
            await asyncio.sleep(0)  # see below: let other tasks run
        if (
            self._drainer is None
            and not self._pending
            and loop_is_alone(int(self._inline_run > 0))
            and self.db.try_inline_write()
        ):
            # A lone append on a SQLite file (nothing else is queued or ready to run that
            # could share its commit) with the write lock free: commit it here, on the
            # loop's thread, with no task or future (the sequential hot path). Such an
            # await does not yield: after _INLINE_RUN of them in a row with no turn of the
            # loop between, the next one yields first so other tasks run.
            if not self._inline_run:
                asyncio.get_running_loop().call_soon(self._loop_turned)
            self._inline_run += 1
            # (a clash raises out of the transaction, rolled back)
            out = self.db.write_raw_sync(partial(self._appender.one, req=request), locked=True)
            self._settle_one(request, out)
            return out
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[AppendResult] = loop.create_future()
        self._pending.append(([request], fut, len(request.rows)))
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())
        return await fut

    def _loop_turned(self) -> None:
        self._inline_run = 0

    async def append_many(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | Exception]:
        """Queue all the requests at once, so they share group commits (one transaction up
        to ``_MAX_GROUP`` requests or ``_MAX_GROUP_ROWS`` rows); each one's outcome in its
        slot. Conditional and DCB requests are their own transactions, as in ``append``."""
        loop = asyncio.get_running_loop()
        guarded_topics: dict[str, bool] = {}  # topic -> a DCB log
        alone: dict[int, asyncio.Task[AppendResult]] = {}
        for i, req in enumerate(requests):
            dcb = guarded_topics.get(req.topic)
            if dcb is None:
                info = self._entry(req.topic).info
                dcb = guarded_topics[req.topic] = dcb_log(info)
            if dcb or req.condition is not None:
                alone[i] = loop.create_task(self.append(req))
        queued = (
            list(requests) if not alone else [r for i, r in enumerate(requests) if i not in alone]
        )
        outcomes: list[AppendResult | Exception] = []
        if queued:
            # one run and one future for the queued requests, not one each (see _Batch)
            batch = _Batch(len(queued), loop.create_future())
            self._pending.append((queued, batch, sum(len(r.rows) for r in queued)))
            if self._drainer is None:
                self._drainer = loop.create_task(self._drain())
            outcomes = await batch.done
        if not alone:
            return outcomes
        landed = iter(outcomes)
        out: list[AppendResult | Exception] = []
        for i in range(len(requests)):
            task = alone.get(i)
            if task is None:
                out.append(next(landed))
                continue
            try:
                out.append(await task)
            except Exception as exc:
                out.append(exc)
        return out

    async def _drain(self) -> None:
        try:
            while self._pending:
                reqs, sinks = take_group(self._pending)
                work = partial(self._appender.group, reqs=reqs)
                try:
                    if self._async is not None:
                        outcomes = await self._async.group(reqs)
                    elif (
                        self.db.can_inline
                        and self._inline_group(reqs)
                        and self.db.try_inline_write()
                    ):
                        outcomes = self.db.write_raw_sync(work, locked=True)
                    else:
                        outcomes = await self.db.write_raw(work)
                except BaseException as exc:
                    for sink, count in sinks:
                        if isinstance(sink, _Batch):
                            sink.fail(exc, count)
                        elif not sink.done():
                            sink.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                at = 0
                for sink, count in sinks:
                    if isinstance(sink, _Batch):
                        sink.put(outcomes[at : at + count])
                    elif not sink.done():  # (else its caller was cancelled: it landed anyway)
                        out = outcomes[at]
                        if isinstance(out, AppendResult):
                            sink.set_result(out)
                        else:
                            sink.set_exception(out)
                    at += count
                self._settle(reqs, outcomes)
        finally:
            self._drainer = None

    @staticmethod
    def _inline_group(reqs: list[AppendRequest]) -> bool:
        """Whether a group may commit on the loop's thread (given the write lock): one
        request, or up to ``_INLINE_ROWS`` rows with nothing else ready to run on the
        loop (the group's callers all wait for this commit). The hop to the writer thread
        and back costs more than the write of such a group: 64 commands in flight on a
        SQLite file at ``FULL``, 10-25% less CPU per command and 9-38% more commands a
        second (BENCHMARKS.md). A larger group, or one with company, goes to the writer
        thread, so the loop is never held for long."""
        if len(reqs) == 1:
            return True
        if len(reqs) > _INLINE_ROWS or not loop_is_alone():
            return False
        rows = 0
        for req in reqs:
            rows += len(req.rows)
        return rows <= _INLINE_ROWS

    def _settle(
        self, reqs: list[AppendRequest], outcomes: Sequence[AppendResult | Exception]
    ) -> None:
        """After a group commit: heads, change signals, the commit listeners (the relay)."""
        if len(outcomes) == 1:
            self._settle_one(reqs[0], outcomes[0])
            return
        done = [o for o in outcomes if isinstance(o, AppendResult) and not o.duplicate]
        if done:
            heads = self.known_heads
            if len({o.topic for o in done}) == 1:  # (a group of one topic: one pass in C)
                topic, last = done[0].topic, max(o.last_offset for o in done)
                if last > heads.get(topic, 0):
                    heads[topic] = last
            else:
                for out in done:
                    if out.last_offset > heads.get(out.topic, 0):
                        heads[out.topic] = out.last_offset
            self._signal()
            if any(r.schedules for r in reqs) and any(
                r.schedules and isinstance(o, AppendResult) and not o.duplicate
                for r, o in zip(reqs, outcomes, strict=True)
            ):
                self.schedules.signal()
        self._tell(done)

    def _settle_one(self, req: AppendRequest, out: AppendResult | Exception) -> None:
        """``_settle`` of one request (a lone append: the sequential hot path), with no
        pass over lists."""
        done: list[AppendResult] = []
        if isinstance(out, AppendResult) and not out.duplicate:
            done.append(out)
            if out.last_offset > self.known_heads.get(out.topic, 0):
                self.known_heads[out.topic] = out.last_offset
            self._signal()
            if req.schedules:
                self.schedules.signal()
        self._tell(done)

    def _tell(self, done: list[AppendResult]) -> None:
        """The commit listeners (the relay) of what a commit landed."""
        for listener in self.commit_listeners:
            try:
                listener(done)
            except Exception:  # a listener must never fail a commit
                log.exception("commit listener failed")

    async def find_command(self, command_id: str) -> CommandRecord | None:
        """Where the append that carried ``command_id`` landed; None if none has."""
        return await self._commands.find(command_id)

    # -- reading ---------------------------------------------------------------------------

    async def read(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        *,
        upto: int | None = None,
        partition: int | None = None,
    ) -> list[StoredRow]:
        """Rows with ``from_offset <= _offset [<= upto]`` (of one ``partition``, if given)
        in offset order, at most ``limit``."""
        entry = self._entry(topic)
        mark = self.db.mark
        sql = f"{entry.select_sql} WHERE _offset >= {mark}"
        params: tuple[Any, ...] = (from_offset,)
        if partition is not None:
            sql += f" AND _partition = {mark}"
            params += (partition,)
        if upto is not None:
            sql += f" AND _offset <= {mark}"
            params += (upto,)
        sql += f" ORDER BY _offset LIMIT {int(limit)}"
        return await self.db.read(lambda conn: _fetch(conn, sql, params))

    async def read_matching(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        where: sa.ColumnElement[bool],
        *,
        upto: int | None = None,
        partition: int | None = None,
    ) -> tuple[list[StoredRow], int]:
        """Like ``read``, only rows for which the clause ``where`` (over the topic's stored
        columns, values as bound parameters) is true, and the offset the read covered:
        every row of the (partition of the) topic up to it that is not returned does not
        match (``from_offset - 1``: nothing to read yet)."""
        entry = self._entry(topic)
        off: sa.ColumnClause[Any] = sa.column("_offset")
        scope = [off >= from_offset]
        if partition is not None:
            scope.append(sa.column("_partition") == partition)
        if upto is not None:
            scope.append(off <= upto)
        table = sa.table(entry.table)
        cols: list[sa.ColumnClause[Any]] = [sa.column(n) for n in entry.info.columns]

        def work(conn: Connection) -> tuple[list[StoredRow], int]:
            # The bound first: appends to a topic commit in offset order, so every row up
            # to a visible offset is visible to the next statement (also under PostgreSQL's
            # per-statement snapshots).
            bound = conn.execute(sa.select(sa.func.max(off)).select_from(table).where(*scope))
            last = bound.scalar()
            if last is None:
                return [], from_offset - 1
            stmt = (
                sa.select(*cols)
                .select_from(table)
                .where(*scope, off <= int(last), where)
                .order_by(off)
                .limit(int(limit))
            )
            rows = [tuple(r) for r in conn.execute(stmt)]
            return rows, (rows[-1][0] if len(rows) >= limit else int(last))

        return await self.db.read(work)

    async def read_query(
        self, topic: str, query: Query, *, after: int = 0, limit: int | None = None
    ) -> list[StoredRow]:
        """The rows of ``topic`` matching ``query`` at positions after ``after``, in offset
        order (at most ``limit``), read through the tag and type indexes (``dcb.py``)."""
        entry = self._entry(topic)
        looker = self._free_looker()  # PostgreSQL: through libpq from the event loop
        return await read_query(
            self.db,
            entry.select_sql,
            entry.info,
            query,
            after=after,
            limit=limit,
            rows=None if looker is None else looker.read_typed,
        )

    def stream(
        self, topic: str, from_offset: int, page_size: int, *, upto: int | None = None
    ) -> AsyncIterator[list[StoredRow]]:
        """The topic from ``from_offset`` (to ``upto``) in pages of ``page_size`` rows."""
        if self.db.is_sqlite:
            return keyset_pages(
                lambda off, n: self.read(topic, off, n, upto=upto), from_offset, page_size
            )
        mark = self.db.mark
        sql = f"{self._entry(topic).select_sql} WHERE _offset >= {mark}"
        params: tuple[Any, ...] = (from_offset,)
        if upto is not None:
            sql += f" AND _offset <= {mark}"
            params += (upto,)
        return cursor_pages(self.db, sql + " ORDER BY _offset", params, page_size)

    async def read_columns(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        *,
        upto: int | None = None,
        partition: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table | list[StoredRow]:
        """``read``, straight into Arrow where the store can: the stored columns (storage
        order, typed as the driver reads them: see ``TopicSchema.from_storage``), or only
        ``columns`` in that order (``TopicSchema.select_storage``), else the full rows."""
        end = self.known_heads.get(topic, 0) if upto is None else upto
        return await self._columns(
            topic, from_offset, limit, upto, partition, end - from_offset + 1, columns
        )

    def _select(self, topic: str, columns: Sequence[str] | None) -> str:
        """``SELECT`` of the topic's columns, or of ``columns`` (names of the topic's own)."""
        entry = self._entry(topic)
        if columns is None:
            return entry.select_sql
        unknown = [c for c in columns if c not in entry.info.columns]
        if unknown:
            raise StoreError(f"topic {topic!r} has no column {unknown[0]!r}")
        q = self.db.q
        return f"SELECT {', '.join(q(c) for c in columns)} FROM {q(entry.table)}"

    async def _columns(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        upto: int | None,
        partition: int | None,
        remaining: int,
        columns: Sequence[str] | None = None,
    ) -> pa.Table | list[StoredRow]:
        """``read_columns`` of a read with ``remaining`` rows left (this page's and the
        pages' after it: a long read starts the store's Arrow helpers)."""
        arrow = self._arrow
        if arrow.wanted(remaining):
            where = f" WHERE _offset >= {int(from_offset)}"
            if partition is not None:
                where += f" AND _partition = {int(partition)}"
            if upto is not None:
                where += f" AND _offset <= {int(upto)}"
            where += f" ORDER BY _offset LIMIT {int(limit)}"
            sql = self._select(topic, columns) + where
            # Columns that held one value (NULL, one integer) in every row of a long page
            # of this topic read whole are read as one flag (``folded_select``); a page
            # whose flag shows otherwise is read again whole, and the columns that held
            # something else are read as themselves from then on.
            entry = self._entry(topic)
            names = entry.info.columns if columns is None else tuple(columns)
            folds = self._folds.setdefault(topic, {})
            fold = {n: f for n, f in folds.items() if n in names}
            if len(fold) < 2:  # (one column for one flag saves nothing)
                fold = {}
            asked_sql = folded_select(self.db.q, entry.table, names, fold) + where if fold else sql
            # asked here when a helper has room: the pages of a read reach the helpers in
            # its order (threads racing to ask could leave a helper idle behind a later page)
            asked = arrow.ask(asked_sql, limit, remaining)
            if asked is None:
                page = await asyncio.to_thread(arrow.page, asked_sql, limit, remaining)
            else:
                # A helper answers in the order asked: this answer must be taken even if
                # the read is cancelled (a cancelled executor job that had not started
                # would leave the helper's later answers waiting for it forever).
                loop = asyncio.get_running_loop()
                taking = loop.run_in_executor(None, arrow.page, asked_sql, limit, remaining, asked)
                taking.add_done_callback(_retrieved)
                page = await asyncio.shield(taking)
            if page is not None and fold:
                whole = unfold(page, names, fold)
                if whole is None:  # a folded column holds something else: read it whole
                    whole = await asyncio.to_thread(arrow.page, sql, limit, remaining)
                    if whole is not None:
                        held = constants(whole, names, fold)
                        broken = [
                            n for n, f in fold.items() if n not in held or held[n].value != f.value
                        ]
                        # (all of them if none is now: rows went by retention, say)
                        for n in broken or fold:
                            folds.pop(n, None)
                page = whole
            if page is not None and page.num_rows >= LEARN_AT:  # learn from a long page
                # (the columns it read as themselves: a folded read's others, say after a
                # read of a few columns taught two of them)
                checked = self._checked.setdefault(topic, set())
                new = [n for n in names if n in FOLDABLE and n not in checked and n not in fold]
                if new:
                    checked.update(new)
                    folds.update(constants(page, names, new))
            if page is not None:
                return page
        return await self.read(topic, from_offset, limit, upto=upto, partition=partition)

    async def stream_columns(
        self,
        topic: str,
        from_offset: int,
        page_size: int,
        *,
        upto: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> AsyncIterator[pa.Table | list[StoredRow]]:
        """``stream`` up to the head (or ``upto``), each page as ``read_columns`` reads it
        (``columns``: an Arrow page holds only those; a page of rows, every column).

        Pages are ranges of offsets from the first one stored at or after ``from_offset``
        (a topic's offsets are gapless past its retention horizon), so several are read at
        once: two on two PostgreSQL connections, four through a SQLite file's helpers (two
        each: a helper reads its next page while the last one is taken in)."""
        if not self._arrow.available:
            async for rows in self.stream(topic, from_offset, page_size, upto=upto):
                yield rows
            return
        end = await self.head(topic) if upto is None else upto
        start = await self._first_offset(topic, from_offset, end)
        if start is None:
            return
        pending: deque[asyncio.Future[pa.Table | list[StoredRow]]] = deque()
        ahead = self._arrow.ahead
        try:
            while start <= end or pending:
                while len(pending) < ahead and start <= end:
                    hi = min(end, start + page_size - 1)
                    left = end - start + 1
                    read = self._columns(topic, start, page_size, hi, None, left, columns)
                    pending.append(asyncio.ensure_future(read))
                    start = hi + 1
                page = await pending.popleft()
                if len(page):
                    yield page
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _first_offset(self, topic: str, from_offset: int, upto: int) -> int | None:
        """The first offset of ``topic`` stored in ``from_offset..upto`` (None: none is)."""
        sql = (
            f"SELECT MIN(_offset) FROM {self.db.q(self._entry(topic).info.table)} "
            f"WHERE _offset >= {int(from_offset)} AND _offset <= {int(upto)}"
        )

        def work(conn: Connection) -> int | None:
            cur = raw_cursor(conn)
            cur.execute(sql)
            row = cur.fetchone()
            return None if row is None or row[0] is None else int(row[0])

        return await self.db.read(work)

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

    def _free_looker(self) -> AsyncAppender | None:
        """PostgreSQL's libpq connection for reads from the event loop (no hop to a reader
        thread and back), if no read holds it now: while one does, the other loads and DCB
        reads take the reader threads instead of waiting. None on SQLite."""
        looker = self._looker
        return None if looker is None or looker.reading else looker

    async def load(
        self, topic: str, aggregate_id: str
    ) -> tuple[tuple[int, str, str] | None, list[StoredRow]]:
        """The aggregate's snapshot ``(version, fingerprint, state)`` and the rows after it."""
        entry = self._entry(topic)
        if entry.load_sql is not None:  # PostgreSQL: one statement (see _load_sql)
            load_sql = entry.load_sql
            params = (aggregate_id, topic, aggregate_id, topic, aggregate_id)
            looker = self._free_looker()
            if looker is not None:  # from the event loop through libpq
                return _snapshot_first(await looker.read_typed(load_sql, params))

            def one(conn: Connection) -> tuple[tuple[int, str, str] | None, list[StoredRow]]:
                cur = raw_cursor(conn)
                cur.execute(load_sql, params)
                return _snapshot_first(cur.fetchall())

            return await self.db.read_point(one)
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

        return await self.db.read_point(work)

    async def load_many(
        self, topic: str, aggregate_ids: Sequence[str]
    ) -> dict[str, tuple[tuple[int, str, str] | None, list[StoredRow]]]:
        """``load`` of many aggregates in one read: their snapshots, then their rows after
        them, ``_LOAD_CHUNK`` ids per query (an unknown id maps to ``(None, [])``)."""
        entry = self._entry(topic)
        mark = self.db.mark
        ids = list(dict.fromkeys(aggregate_ids))
        looker = self._free_looker()
        if entry.load_many_sql is not None and looker is not None:
            # PostgreSQL: from the event loop through libpq, one statement per chunk (its
            # aggregates read from one snapshot of the database)
            out: dict[str, tuple[tuple[int, str, str] | None, list[StoredRow]]] = {}
            for at in range(0, len(ids), _LOAD_CHUNK_PG):
                chunk = ids[at : at + _LOAD_CHUNK_PG]
                got = await looker.read_typed(entry.load_many_sql, (json.dumps(chunk), topic))
                out.update(_by_aggregate(chunk, got))
            return out

        def work(
            conn: Connection,
        ) -> dict[str, tuple[tuple[int, str, str] | None, list[StoredRow]]]:
            out: dict[str, tuple[tuple[int, str, str] | None, list[StoredRow]]] = {}
            cur = raw_cursor(conn)
            if not self.db.is_sqlite:
                # Index lookups of the ids whatever the table's statistics say: a table
                # that grew since autovacuum last analyzed it (a bulk load, a new store)
                # looks small to the planner, which then scans it whole for the ids'
                # rows, on every call (4 ms a window at 20,000 rows, growing with them).
                cur.execute("SET LOCAL enable_seqscan = off")
            step = _LOAD_CHUNK if self.db.is_sqlite else _LOAD_CHUNK_PG
            for at in range(0, len(ids), step):
                chunk = ids[at : at + step]
                among, params = self.db.member_of("aggregate_id", chunk)
                cur.execute(
                    "SELECT aggregate_id, version, fingerprint, state FROM rv_snapshots "
                    f"WHERE topic = {mark} AND {among}",
                    (topic, *params),
                )
                snaps = {a: (int(v), f, st) for a, v, f, st in cur.fetchall()}
                rows: dict[str, list[StoredRow]] = {a: [] for a in chunk}
                among, params = self.db.member_of("_aggregate_id", chunk)
                for r in _fetch(
                    conn,
                    f"{entry.select_sql} WHERE {among} ORDER BY _aggregate_id, _version",
                    params,
                ):
                    snap = snaps.get(r[AGGREGATE_AT])
                    if snap is None or r[VERSION_AT] > snap[0]:
                        rows[r[AGGREGATE_AT]].append(r)
                for a in chunk:
                    out[a] = (snaps.get(a), rows[a])
            return out

        if self.db.is_sqlite:
            return await self.db.read_point(work)
        return await self.db.read(work)  # (a transaction: for the SET LOCAL)

    async def save_snapshot(
        self, topic: str, aggregate_id: str, version: int, fingerprint: str, state: str
    ) -> None:
        """Store the aggregate's state at ``version`` (replacing an older snapshot)."""
        sql = snapshot_sql(self.db)
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

    async def partition_heads(
        self, topics: Sequence[str], *, upto: Mapping[str, int] | None = None
    ) -> dict[tuple[str, int], int]:
        """The last offset of every partition of ``topics`` (0 when a partition is empty),
        or the last one at or before ``upto[topic]``."""
        parts: list[tuple[str, int, str]] = []
        for name in topics:
            entry = self._entry(name)
            parts += [(name, p, entry.table) for p in range(entry.topic.partitions)]
        if not parts:
            return {}
        mark = self.db.mark
        # One index lookup per partition (``ix_<table>_partition``), in one round trip.
        bound = f" AND _offset <= {mark}" if upto is not None else ""
        single = {name for name in topics if self._entry(name).topic.partitions == 1}
        sql = " UNION ALL ".join(
            f"SELECT {mark}, {mark}, MAX(_offset) FROM {self.db.q(t)} "
            + (f"WHERE _offset <= {mark}" if upto is not None else "")
            if name in single
            else f"SELECT {mark}, {mark}, MAX(_offset) FROM {self.db.q(t)} "
            f"WHERE _partition = {mark}{bound}"
            for name, _, t in parts
        )
        params = tuple(
            x
            for name, p, _ in parts
            for x in (
                (name, p)
                + (() if name in single else (p,))
                + (() if upto is None else (upto.get(name, 0),))
            )
        )

        def work(conn: Connection) -> dict[tuple[str, int], int]:
            return {
                (str(t), int(p)): int(h or 0) for t, p, h in conn.exec_driver_sql(sql, params).all()
            }

        return await self.db.read(work)

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


class _Batch:
    """The outcomes of one ``append_many``'s queued requests, under one future (not one
    per request). Groups take requests from the queue in order, so the outcomes arrive
    in the order the requests were queued: each group's are added, and the future is done
    with the last (or with an error that is not an ``Exception``, which it raises)."""

    __slots__ = ("done", "outcomes", "size")

    def __init__(self, size: int, done: asyncio.Future[list[AppendResult | Exception]]) -> None:
        self.size = size
        self.done = done
        self.outcomes: list[AppendResult | Exception] = []

    def put(self, outs: Sequence[AppendResult | Exception]) -> None:
        self.outcomes += outs
        if len(self.outcomes) == self.size and not self.done.done():
            self.done.set_result(self.outcomes)

    def fail(self, exc: BaseException, count: int) -> None:
        """``count`` of the requests failed with ``exc``."""
        if isinstance(exc, Exception):
            self.put([exc] * count)
        elif not self.done.done():  # (its caller was cancelled: nothing to tell)
            self.done.set_exception(exc)


#: Where a queued run's outcomes go: an ``append``'s future, or an ``append_many``'s batch.
_Sink = asyncio.Future[AppendResult] | _Batch


def take_group(
    pending: deque[tuple[list[AppendRequest], _Sink, int]],
) -> tuple[list[AppendRequest], list[tuple[_Sink, int]]]:
    """The next group commit's requests, taken in order from the head of ``pending``
    (the store's queue: runs of requests, each with its sink and row count), and where
    their outcomes go: each sink with its count of requests. Up to ``_MAX_GROUP``
    requests, and none more once ``_MAX_GROUP_ROWS`` rows are taken: as taking the
    requests one by one would, but a run that fits whole costs no step per request. A
    run taken in part stays at the head with the rest."""
    reqs: list[AppendRequest] = []
    sinks: list[tuple[_Sink, int]] = []
    rows = 0
    while pending and len(reqs) < _MAX_GROUP and (not reqs or rows < _MAX_GROUP_ROWS):
        run, sink, n = pending[0]
        if len(reqs) + len(run) <= _MAX_GROUP and rows + n - len(run[-1].rows) < _MAX_GROUP_ROWS:
            # the whole run: each of its requests comes before the row limit is reached
            # (the last may cross it)
            pending.popleft()
            reqs += run
            sinks.append((sink, len(run)))
            rows += n
            continue
        take = 0  # the run's requests one by one, while they fit
        while take < len(run) and len(reqs) < _MAX_GROUP and (not reqs or rows < _MAX_GROUP_ROWS):
            rows += len(run[take].rows)
            reqs.append(run[take])
            take += 1
        sinks.append((sink, take))
        if take == len(run):
            pending.popleft()
        else:
            pending[0] = (run[take:], sink, n - sum(len(r.rows) for r in run[:take]))
    return reqs, sinks


def _offset_is_rowid(conn: Connection, table: str) -> bool:
    """Whether a SQLite topic table's ``_offset`` is its rowid (declared exactly
    ``INTEGER PRIMARY KEY``, as ``topic_table`` makes it): then SQLite itself gives an
    inserted NULL the largest offset plus one."""
    cols = conn.exec_driver_sql(f"PRAGMA table_info({quote_text(table)})").all()
    keys = [(c[1], str(c[2]).upper()) for c in cols if c[5]]
    return keys == [("_offset", "INTEGER")]


def quote_text(name: str) -> str:
    """``name`` as a SQL string literal."""
    return "'" + name.replace("'", "''") + "'"


#: Where ``_load_sql``'s snapshot row carries the snapshot (columns of the rows' own
#: types: bigint, text, text): its version, fingerprint and state.
_SNAPSHOT_AS = {"_row_idx": "version", "_type": "fingerprint", "_msg_id": "state"}
_SNAP_VERSION_AT, _SNAP_FINGERPRINT_AT, _SNAP_STATE_AT = ROW_IDX_AT, TYPE_AT, MSG_ID_AT


def _snapshot_first(
    rows: list[StoredRow],
) -> tuple[tuple[int, str, str] | None, list[StoredRow]]:
    """``_load_sql``'s rows -> the snapshot ``(version, fingerprint, state)`` (None if
    its first row is not one) and the rows after it."""
    if not rows or rows[0][OFFSET_AT] is not None:
        return None, rows
    s = rows[0]  # the snapshot's row
    return (int(s[_SNAP_VERSION_AT]), s[_SNAP_FINGERPRINT_AT], s[_SNAP_STATE_AT]), rows[1:]


def _load_sql(q: Callable[[str], str], table: str, names: Sequence[str]) -> str:
    """PostgreSQL's ``load`` of an aggregate as one statement, so one round trip with no
    transaction around it (one statement reads one consistent snapshot of the database):
    the aggregate's snapshot, if it has one, as a first row of the same columns (NULL
    ``_offset`` and ``_version``; version, fingerprint and state where ``_SNAPSHOT_AS``
    puts them), then the rows after it by version. No column is added to the rows, so a
    long tail costs no more than its own query. Parameters: aggregate id, topic,
    aggregate id, topic, aggregate id."""
    snapshot = "FROM rv_snapshots WHERE topic = %s AND aggregate_id = %s"
    cols = ", ".join(q(n) for n in names)
    as_rows = ", ".join(_SNAPSHOT_AS.get(n, "NULL") for n in names)
    return (
        f"SELECT {cols} FROM {q(table)} WHERE _aggregate_id = %s "
        f"AND _version > COALESCE((SELECT version {snapshot}), 0) "
        f"UNION ALL SELECT {as_rows} {snapshot} ORDER BY _version NULLS FIRST"
    )


def _load_many_sql(q: Callable[[str], str], table: str, names: Sequence[str]) -> str:
    """PostgreSQL's ``load`` of many aggregates as one statement (``_load_sql`` for a
    list of ids): each aggregate's snapshot row (its ``_aggregate_id`` set), then its rows
    after it, aggregate by aggregate. Parameters: the ids as a JSON array, the topic."""
    snap_as = {"_aggregate_id": "aggregate_id", **_SNAPSHOT_AS}
    as_rows = ", ".join(snap_as.get(n, "NULL") for n in names)
    by = f"{names.index('_aggregate_id') + 1}, {names.index('_version') + 1}"
    return (
        "WITH ids AS MATERIALIZED (SELECT json_array_elements_text(%s::json) AS id), "
        "snaps AS MATERIALIZED (SELECT * FROM rv_snapshots WHERE topic = %s "
        "AND aggregate_id = ANY(ARRAY(SELECT id FROM ids))) "
        f"SELECT {', '.join('t.' + q(n) for n in names)} FROM {q(table)} t "
        "LEFT JOIN snaps s ON s.aggregate_id = t._aggregate_id "
        "WHERE t._aggregate_id = ANY(ARRAY(SELECT id FROM ids)) "
        "AND t._version > COALESCE(s.version, 0) "
        f"UNION ALL SELECT {as_rows} FROM snaps ORDER BY {by} NULLS FIRST"
    )


def _by_aggregate(
    ids: Sequence[str], rows: list[StoredRow]
) -> dict[str, tuple[tuple[int, str, str] | None, list[StoredRow]]]:
    """``_load_many_sql``'s rows -> each of ``ids``' snapshot and rows after it (an id
    with neither: ``(None, [])``)."""
    mine: dict[str, list[StoredRow]] = {}
    for r in rows:
        got = mine.get(r[AGGREGATE_AT])
        if got is None:
            mine[r[AGGREGATE_AT]] = [r]
        else:
            got.append(r)
    return {a: _snapshot_first(mine[a]) if a in mine else (None, []) for a in ids}


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a shielded job's outcome as seen (its caller may have been cancelled)."""
    if not fut.cancelled():
        fut.exception()


def raw_cursor(conn: Connection) -> Any:
    """The DBAPI cursor of a SQLAlchemy connection (for the hot paths)."""
    return conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]


def _fetch(conn: Connection, sql: str, params: Sequence[Any]) -> list[StoredRow]:
    cur = raw_cursor(conn)
    cur.execute(sql, tuple(params))
    return [tuple(r) for r in cur.fetchall()]
