"""PostgreSQL appends on an asyncio connection (psycopg's AsyncConnection, opened through
SQLAlchemy's async engine): the group commit talks to the server from the event loop,
with no hop to a worker thread.

Offsets come from the topic's counter row in ``rv_topics``, bumped inside the appending
transaction; its row lock is held to commit, so appends to one topic commit in offset
order and a reader never sees offset N+1 before N. The bump also queues the commit-time
``NOTIFY rv_events, '<topic>:<head>'`` (dropped with a rolled-back savepoint), which
wakes the collectors of every process on the store.

The connection autocommits: a lone append of up to ``_CTE_ROWS`` rows is one statement
(bump in a CTE, then the INSERT), its own transaction, one round trip. Groups open an
explicit transaction (same savepoint scheme as ``append.Appender``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import ConcurrencyError, StoreError
from .append import (
    NOTIFY_CHANNEL,
    AppendRequest,
    AppendResult,
    DuplicateCommand,
    StoredRow,
    TableInfo,
    by_topic,
    command_row,
    command_rows,
    command_sql,
    lock_order,
    place,
    snapshot_rows,
    snapshot_sql,
)
from .database import Database, write_error
from .dcb import cursor_run, guarded, pg_guard
from .pqlean import LeanStatements
from .schedules import write_statements
from .tagindex import split_append

#: Up to this many rows, one statement reserves the offsets and inserts (a CTE).
_CTE_ROWS = 16
#: Up to this many rows, the one statement binds each value (1 + 16 * 3 parameters: psycopg
#: caches the parse of statements of up to 50); more go as one array per column.
_VALUES_ROWS = 3
#: Up to this many rows, a group of plain appends to one topic is one statement through
#: libpq (one prepared statement per row count: at most this many per topic).
_GROUP_ROWS = 64
#: COPY pays off from about this many rows in one statement.
_COPY_ROWS = 64

T = TypeVar("T")
#: The head of the CTE recording command ids (``_with_command``, ``_with_commands``).
_RECORD = (
    "cm AS (INSERT INTO rv_commands (command_id, topic, aggregate_id, first_offset, "
    "last_offset, version)"
)
_BUMP = (
    "UPDATE rv_topics SET head = head + %s WHERE name = %s "
    f"RETURNING head, pg_notify('{NOTIFY_CHANNEL}', name || ':' || head::text)"
)


def _command_arrays(reqs: list[AppendRequest]) -> tuple[list[Any], ...]:
    """The command ids of a group's requests as ``_with_commands`` takes them: ids,
    aggregate ids, the first and last positions of their rows in the group (from 1), and
    the versions they leave."""
    ids: list[Any] = []
    aggs: list[Any] = []
    lo: list[Any] = []
    hi: list[Any] = []
    versions: list[Any] = []
    at = 1
    for r in reqs:
        n = len(r.rows)
        if r.command_id is not None:
            ids.append(r.command_id)
            aggs.append(r.aggregate_id)
            lo.append(at)
            hi.append(at + n - 1)
            versions.append(None if r.expected_version is None else r.expected_version + n)
        at += n
    return ids, aggs, lo, hi, versions


def _placed(reqs: list[AppendRequest], offsets: Sequence[Any]) -> list[AppendResult]:
    """The requests' results from the ``_offset`` values (ints, or libpq's text) that
    their one statement returned; ``StoreError`` if fewer rows came back than were sent
    (no such topic in ``rv_topics``)."""
    got = [int(o) for o in offsets if o is not None]
    topic = reqs[0].topic
    if len(got) != sum(len(r.rows) for r in reqs):
        raise StoreError(f"topic {topic!r} is not registered in the store")
    return place(topic, reqs, min(got))[0]


class AsyncAppender:
    """Writes groups of append requests on one long-lived async connection."""

    def __init__(
        self,
        db: Database,
        table_of: Callable[[str], TableInfo],
        url: sa.URL,
        session: Sequence[str] = (),
    ) -> None:
        self.db = db
        self.table_of = table_of
        self.url = url
        #: Statements run on each new connection (settings of the session).
        self.session = tuple(session)
        self._engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None
        # the psycopg connection under _conn, and a duplicate of its socket (a deadline
        # shuts it down), kept while _conn is: no greenlet hop or dup() per group
        self._driver: tuple[Any, socket.socket] | None = None
        #: The one-statement appends through the connection's libpq handle (pqlean.py).
        self._lean: LeanStatements | None = None
        self._cte: dict[tuple[str, int], str] = {}
        #: Held by a read through libpq (``read_typed``).
        self._reading = asyncio.Lock()

    async def _connection(self) -> tuple[Any, socket.socket]:
        if self._lean is not None and self._lean.broken and self._conn is not None:
            await self._conn.invalidate()  # a wait cut short may have left an answer unread
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._forget_driver()
            if self._engine is None:
                self._engine = create_async_engine(self.url)
            self._conn = await self._engine.connect()
            raw = await self._conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            await driver.set_autocommit(True)
            for statement in self.session:
                await driver.execute(statement)
            self._driver = (driver, socket.socket(fileno=os.dup(driver.fileno())))
            self._lean = LeanStatements(driver)
        assert self._driver is not None
        return self._driver

    def _forget_driver(self) -> None:
        if self._driver is not None:
            self._driver[1].close()  # the duplicate: the connection is the pool's to close
            self._driver = None
        self._lean = None

    async def close(self) -> None:
        """Close the connection and dispose the async engine."""
        self._forget_driver()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def group(self, reqs: list[AppendRequest]) -> list[AppendResult | Exception]:
        """Append ``reqs`` atomically; clashes fail only their request. Bounded by the
        store's ``timeout`` (``StoreError``: the group may or may not have committed)."""
        return await self._bounded(partial(self._group, reqs=reqs))

    async def read_typed(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of one read statement through libpq, each value loaded as a psycopg
        cursor would (its column's type), on this appender's connection (one that only
        reads: its statements never run inside a transaction). Repeated once on a fresh
        connection if the connection was lost (a restarted server), as the store's reads
        are; bounded by the store's ``timeout``."""

        async def rows(_: Any) -> list[tuple[Any, ...]]:
            assert self._lean is not None
            return await self._lean.typed_rows(sql, params)

        async with self._reading:
            return await self._bounded(rows, reading=True)

    async def write_first_column(self, sql: str, params: Sequence[Any]) -> list[bytes | None]:
        """One write statement (psycopg's ``%s`` placeholders), its own transaction,
        through libpq from the event loop; the first column of its rows as text. One at a
        time on the connection; bounded by the store's ``timeout``, a lost connection a
        ``StoreError`` (the statement may or may not have committed)."""

        async def first(_: Any) -> list[bytes | None]:
            assert self._lean is not None
            return await self._lean.first_column(sql, params)

        async with self._reading:
            return await self._bounded(first)

    @property
    def reading(self) -> bool:
        """Whether a ``read_typed`` runs (the others wait for it: one statement at a time
        on the connection)."""
        return self._reading.locked()

    async def _bounded(self, work: Callable[[Any], Awaitable[T]], *, reading: bool = False) -> T:
        """``work(connection)`` under the store's ``timeout``, its driver's errors typed
        (``StoreFullError`` for a full disk); ``reading``: a lost connection is replaced
        and ``work`` repeated once."""
        deadline = self.db.deadline()
        timer = None
        if deadline is not None:  # counts from here: a (re)connect is part of the wait
            timer = asyncio.get_running_loop().call_later(deadline.seconds, deadline.expire)
        verb = "read" if reading else "write"
        try:
            for attempt in (1, 2):
                try:
                    aconn, sock = await self._connection()  # bounded by connect_timeout
                except sa.exc.OperationalError as exc:
                    raise StoreError(f"store {verb} failed: {exc.orig}") from exc
                except self.db.operational_errors as exc:
                    raise StoreError(f"store {verb} failed: {exc}") from exc
                if deadline is not None:
                    deadline.arm_socket(sock)  # StoreError if connecting used the time up
                try:
                    return await work(aconn)
                except self.db.operational_errors as exc:
                    if self._conn is not None:
                        await self._conn.invalidate()
                    if deadline is not None and deadline.expired:
                        raise deadline.error() from exc
                    if reading and attempt == 1:
                        continue  # a read is safe to repeat, on a fresh connection
                    if reading:
                        raise StoreError(f"store read failed: {exc}") from exc
                    raise write_error(exc) from exc  # StoreFullError on a full disk
                finally:
                    if deadline is not None:
                        deadline.disarm()
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            if timer is not None:
                timer.cancel()

    async def _group(self, aconn: Any, reqs: list[AppendRequest]) -> list[AppendResult | Exception]:
        req = reqs[0]
        info = self.table_of(req.topic)
        lean = self._lean is not None and self._lean.idle  # a statement of its own: libpq
        if len(reqs) == 1 and guarded(req, info):
            if (
                lean and not req.schedules and req.snapshot is None and len(req.rows) <= _CTE_ROWS
            ):  # its statements through libpq, in a transaction of their own
                return [await self._guarded_lean(req, info)]
            cur = aconn.cursor()
            try:  # a DCB append: its lock keys and condition first (dcb.py)
                async with aconn.transaction():
                    await pg_guard(cursor_run(cur), self.db, info, req)
                    return [await self._one(cur, req)]
            except DuplicateCommand:
                return [AppendResult(req.topic, 0, -1, duplicate=True)]
        if (
            len(reqs) == 1
            and not req.schedules
            and (req.snapshot is None or info.tags is None)
            and len(req.rows) <= _CTE_ROWS
        ):  # one atomic statement (through libpq: no cursor)
            if req.command_id is None:
                return [await self._lone(None if lean else aconn.cursor(), req, snapshot=True)]
            if lean and req.rows:  # its command id recorded in the same statement
                try:
                    return [await self._lone(None, req, snapshot=True, command=True)]
                except ConcurrencyError:
                    lean = False  # nothing landed: a clash, or the id is recorded; the
                    # transaction below tells which
        clashed = False
        if lean and self._plain(reqs, info):
            try:
                return list(await self._plain_group(reqs, info))
            except self.db.integrity_errors:  # nothing written: each on its own below
                clashed = True
        cur = aconn.cursor()
        if len(reqs) == 1:
            try:
                async with aconn.transaction():
                    return [await self._one(cur, req)]
            except DuplicateCommand:
                return [AppendResult(req.topic, 0, -1, duplicate=True)]
        async with aconn.transaction():
            if clashed:
                return await self._each(aconn, cur, reqs)
            return await self._many(aconn, cur, reqs)

    async def _guarded_lean(self, req: AppendRequest, info: TableInfo) -> AppendResult:
        """A DCB append without schedules or a snapshot: ``BEGIN``, its lock keys and
        condition (``pg_guard``), its rows' statement, its command id's record and
        ``COMMIT``, each sent through libpq (psycopg's async cursor costs several times the
        CPU per statement). A recorded command id rolls it back as a ``duplicate``; a
        failure rolls it back before it is raised; a wait cut short shuts the connection
        down (``_cut``)."""
        lean = self._lean
        assert lean is not None
        run = lean.typed_rows
        await run("BEGIN", ())
        try:
            await pg_guard(run, self.db, info, req)
            result = await self._lone(None, req, in_block=True)
            if req.command_id is not None:
                try:
                    await run(command_sql(self.db), command_row(req, result))
                except self.db.integrity_errors:  # recorded already: nothing of it lands
                    await run("ROLLBACK", ())
                    return AppendResult(req.topic, 0, -1, duplicate=True)
            await run("COMMIT", ())
        except BaseException:
            if not lean.broken and not lean.idle:
                try:
                    await run("ROLLBACK", ())
                except Exception:  # the cause is raised; the connection is replaced
                    lean.broken = True
            if lean.broken:  # (a wait cut short: its transaction may still be open)
                self._cut()
            raise
        return result

    def _cut(self) -> None:
        """Shut the connection's socket down now: the server ends the session, rolling
        back a transaction left open and releasing its locks, rather than when the
        connection is next used (and replaced)."""
        if self._driver is not None:
            with contextlib.suppress(OSError):
                self._driver[1].shutdown(socket.SHUT_RDWR)

    def _plain(self, reqs: list[AppendRequest], info: TableInfo) -> bool:
        """Whether the group is rows alone (and command ids), of one topic (``info``'s),
        few enough for one statement (``_plain_group``): no schedules, snapshots or
        conditions."""
        topic = reqs[0].topic
        return sum(len(r.rows) for r in reqs) <= _GROUP_ROWS and all(
            r.topic == topic
            and (r.command_id is None or r.rows)
            and not r.schedules
            and r.snapshot is None
            and not guarded(r, info)
            for r in reqs
        )

    async def _plain_group(self, reqs: list[AppendRequest], info: TableInfo) -> list[AppendResult]:
        """A ``_plain`` group as one autocommitted statement through libpq (the lone
        append's, with every request's rows): all of it lands or none (a clash raises the
        driver's ``IntegrityError``)."""
        assert self._lean is not None
        n = sum(len(r.rows) for r in reqs)
        sql = self._cte_sql(info, n)
        if info.tags is not None:
            sql = info.tags.pg_cte(sql)
        params: tuple[Any, ...] = (
            reqs[0].topic,
            *(v for r in reqs for row in r.rows for v in row),
        )
        if any(r.command_id is not None for r in reqs):
            sql = self._with_commands(sql, n)
            params += (reqs[0].topic, *_command_arrays(reqs))
        return _placed(reqs, await self._lean.first_column(sql, params))

    async def _many(
        self, aconn: Any, cur: Any, reqs: list[AppendRequest]
    ) -> list[AppendResult | Exception]:
        """The group in the caller's transaction, in a savepoint; a clash sends each
        request again on its own (``_each``), so that only the clashing ones fail."""
        order = lock_order(reqs)
        try:
            async with aconn.transaction():  # a savepoint
                done = await self._all(cur, [reqs[i] for i in order])
        except self.db.integrity_errors:
            return await self._each(aconn, cur, reqs)
        results: list[AppendResult | Exception | None] = [None] * len(reqs)
        for i, res in zip(order, done, strict=True):
            results[i] = res
        return [r for r in results if r is not None]

    async def _each(
        self, aconn: Any, cur: Any, reqs: list[AppendRequest]
    ) -> list[AppendResult | Exception]:
        """Each request in a savepoint of its own (in topic order): a clash fails only its
        request (``ConcurrencyError`` in its slot)."""
        results: list[AppendResult | Exception | None] = [None] * len(reqs)
        for i in lock_order(reqs):
            try:
                async with aconn.transaction():
                    results[i] = await self._one(cur, reqs[i])
            except ConcurrencyError as exc:
                results[i] = exc
            except DuplicateCommand:
                results[i] = AppendResult(reqs[i].topic, 0, -1, duplicate=True)
        return [r for r in results if r is not None]

    async def _bump(self, cur: Any, topic: str, n: int) -> int:
        await cur.execute(_BUMP, (n, topic))
        row = await cur.fetchone()
        return int(row[0]) - n + 1

    async def _insert(self, cur: Any, topic: str, rows: list[StoredRow]) -> None:
        info = self.table_of(topic)
        if len(rows) < _COPY_ROWS:
            await cur.executemany(info.insert_sql, rows)
        else:
            q = self.db.q
            cols = ", ".join(q(c) for c in info.columns)
            sql = f"COPY {q(info.table)} ({cols}) FROM STDIN (FORMAT BINARY)"
            async with cur.copy(sql) as copy:
                copy.set_types(info.pg_types)
                for row in rows:
                    await copy.write_row(row)
        if info.tags is not None:  # the tag index, in the same transaction
            index = info.tags.rows(rows)
            if len(index) < _COPY_ROWS:
                if index:
                    await cur.executemany(info.tags.insert_sql, index)
                return
            sql = f"COPY {info.tags.quoted} (tag, _offset, _type) FROM STDIN (FORMAT BINARY)"
            async with cur.copy(sql) as copy:
                copy.set_types(("text", "int8", "text"))
                for row in index:
                    await copy.write_row(row)

    def _with_snapshot(self, sql: str) -> str:
        """The one-statement append ``sql`` also storing the request's snapshot (its
        parameters after the rows': topic, aggregate id, version, fingerprint, state)."""
        key = (sql, -1)
        out = self._cte.get(key)
        if out is None:
            head, insert = split_append(sql)
            out = self._cte[key] = (
                f"{head}), ins AS (INSERT INTO {insert}), "
                f"sn AS ({snapshot_sql(self.db)}) SELECT _offset FROM ins"
            )
        return out

    def _plus(self, sql: str, kind: int, cte: str) -> str:
        """The one-statement append ``sql`` (plain, or ending ``SELECT _offset FROM ins``)
        with the data-modifying ``cte`` after its others (its parameters after all others'),
        kept by ``(sql, kind)``."""
        key = (sql, kind)
        out = self._cte.get(key)
        if out is None:
            tail = " SELECT _offset FROM ins"
            if not sql.endswith(tail):
                head, insert = split_append(sql)
                sql = f"{head}), ins AS (INSERT INTO {insert}){tail}"
            out = self._cte[key] = f"{sql.removesuffix(tail)}, {cte}{tail}"
        return out

    def _with_command(self, sql: str) -> str:
        """``sql`` also recording the request's command id in ``rv_commands`` (parameters:
        command id, topic, aggregate id, version): a recorded id fails the statement (a
        unique key), and nothing of it lands."""
        return self._plus(
            sql,
            -2,
            f"{_RECORD} SELECT %s, %s, %s, min(_offset), max(_offset), %s::bigint FROM ins)",
        )

    def _with_commands(self, sql: str, n: int) -> str:
        """``_with_command`` for a group statement of ``n`` rows: its requests' command
        ids recorded from arrays (``_command_arrays``; after them, the topic first), each
        at the offsets of its rows' positions in the group."""
        return self._plus(
            sql,
            -3,
            f"{_RECORD} SELECT c.id, %s, c.agg, h.head - {n} + c.lo, h.head - {n} + c.hi, "
            "c.ver FROM h, unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], "
            "%s::bigint[]) AS c(id, agg, lo, hi, ver))",
        )

    def _unnest_sql(self, info: TableInfo) -> str:
        """Reserve ``n`` offsets and insert ``n`` rows in one statement, the rows' values
        as one array per column: one text (psycopg caches its parse) for any ``n``.
        Parameters: ``n``, the topic, ``n``, then the column arrays."""
        key = (info.table, 0)
        sql = self._cte.get(key)
        if sql is None:
            q = self.db.q
            types = info.pg_types[1:]  # all but _offset
            names = [f"c{i}" for i in range(len(types))]
            arrays = ", ".join(f"%s::{t}[]" for t in types)
            sql = self._cte[key] = (
                f"WITH h AS ({_BUMP}) "
                f"INSERT INTO {q(info.table)} ({', '.join(q(c) for c in info.columns)}) "
                f"SELECT h.head - %s + v.k, {', '.join('v.' + c for c in names)} "
                f"FROM h, unnest({arrays}) WITH ORDINALITY AS v({', '.join(names)}, k) "
                "RETURNING _offset"
            )
        return sql

    def _cte_sql(self, info: TableInfo, n: int) -> str:
        """Reserve ``n`` offsets and insert ``n`` rows in one statement."""
        key = (info.table, n)
        sql = self._cte.get(key)
        if sql is None:
            q = self.db.q
            types = info.pg_types[1:]  # all but _offset
            values = ", ".join(
                f"({k}, " + ", ".join(f"%s::{t}" for t in types) + ")" for k in range(1, n + 1)
            )
            names = [f"c{i}" for i in range(len(types))]
            sql = self._cte[key] = (
                f"WITH h AS ({_BUMP.replace('head + %s', f'head + {n}')}) "
                f"INSERT INTO {q(info.table)} ({', '.join(q(c) for c in info.columns)}) "
                f"SELECT h.head - {n} + v.k, {', '.join('v.' + c for c in names)} "
                f"FROM h, (VALUES {values}) AS v(k, {', '.join(names)}) RETURNING _offset"
            )
        return sql

    async def _lone(
        self,
        cur: Any,
        req: AppendRequest,
        *,
        snapshot: bool = False,
        command: bool = False,
        in_block: bool = False,
    ) -> AppendResult:
        """The request's rows in one statement; with ``snapshot``, its snapshot too (a
        topic without tags: the caller checks); with ``command``, its command id too (a
        recorded one raises ``ConcurrencyError`` as a clash does). Through libpq when the
        connection is idle, or ``in_block``: inside a transaction begun through libpq."""
        n = len(req.rows)
        info = self.table_of(req.topic)
        usable = self._lean is not None and (in_block or self._lean.idle)
        lean = self._lean if usable else None
        params: tuple[Any, ...]
        # (a statement through libpq is prepared once, whatever its parameters: one
        # value per parameter, which the driver dumps in C, not arrays built in Python)
        if n <= (_VALUES_ROWS if lean is None else _CTE_ROWS):
            params = (req.topic, *(v for r in req.rows for v in r))
            sql = self._cte_sql(info, n)
        else:  # one value per parameter would be parsed anew each time (psycopg caches
            # statements of up to 50 parameters): one array per column instead
            params = (n, req.topic, n, *(list(col) for col in zip(*req.rows, strict=True)))
            sql = self._unnest_sql(info)
        if info.tags is not None:  # the tag index rows in the same statement
            sql = info.tags.pg_cte(sql)
        if snapshot and req.snapshot is not None:  # and the snapshot, in the same statement
            sql = self._with_snapshot(sql)
            params += (req.topic, req.aggregate_id, *req.snapshot)
        if command:
            sql = self._with_command(sql)
            version = None if req.expected_version is None else req.expected_version + n
            params += (req.command_id, req.topic, req.aggregate_id, version)
        try:
            if lean is not None:  # its own transaction: ~200 us less CPU than the
                # cursor's execute (pqlean.py)
                offsets = await lean.first_column(sql, params)
            else:
                await cur.execute(sql, params)
                offsets = [o for (o,) in await cur.fetchall()]
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        [result] = _placed([req], offsets)
        return result

    async def _one(self, cur: Any, req: AppendRequest) -> AppendResult:
        """One request inside the caller's transaction or savepoint; raises
        ``DuplicateCommand`` (the caller's block undoes the rows) if its command id is
        recorded already. The command row goes in last, when the offsets are known."""
        if len(req.rows) <= _CTE_ROWS:
            result = await self._lone(cur, req)
        else:
            [result], rows = place(
                req.topic, [req], await self._bump(cur, req.topic, len(req.rows))
            )
            try:
                await self._insert(cur, req.topic, rows)
            except self.db.integrity_errors:
                raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        if req.command_id is not None:
            try:
                await cur.execute(command_sql(self.db), command_row(req, result))
            except self.db.integrity_errors:
                raise DuplicateCommand(req.command_id) from None
        await self._extras(cur, [req])
        return result

    async def _extras(self, cur: Any, reqs: list[AppendRequest]) -> None:
        """What the requests store beside their rows: schedules and snapshots."""
        for sql, params in write_statements(
            self.db, (w for r in reqs for w in r.schedules), notify=True
        ):
            await cur.executemany(sql, params)
        snapshots = snapshot_rows(reqs)
        if snapshots:
            await cur.executemany(snapshot_sql(self.db), snapshots)

    async def _all(self, cur: Any, reqs: list[AppendRequest]) -> list[AppendResult]:
        results: list[AppendResult] = []
        for topic, run, total in by_topic(reqs):
            done, rows = place(topic, run, await self._bump(cur, topic, total))
            await self._insert(cur, topic, rows)
            results += done
        commands = command_rows(reqs, results)
        if commands:
            await cur.executemany(command_sql(self.db), commands)
        await self._extras(cur, reqs)
        return results
