"""One statement at a time through libpq itself (``psycopg.pq``), for the append hot path.

An append of a few rows on PostgreSQL is one statement and one round trip
(``pgasync.py``), yet psycopg's ``AsyncCursor.execute`` of it cost ~300 us of the event
loop's CPU here, against ~100 us for the same statement sent and read through the
connection's own libpq handle (``python -m bench.core``'s sequential commands spent
~350 us of CPU per command on PostgreSQL, ~90 us on SQLite). ``LeanStatements`` sends a
statement prepared once per connection, its parameters dumped as text by psycopg's own
adapters (every Python type psycopg takes), and reads the first column of its rows.

While the answer is on its way, the event loop's thread waits for it in ``poll`` when
nothing else is ready to run (as a lone SQLite commit does), up to ``INLINE_WAIT``
seconds and only until the loop's own selector has something (another socket's data);
otherwise, and after that, it waits as any coroutine does (``add_reader``).

The parameters go as text of unknown type: each statement casts its values to their
columns' types, and PostgreSQL infers the others from their use (``name = $1``).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Sequence
from typing import Any

from psycopg import errors as pg_errors
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer

from .database import loop_is_alone

#: Seconds a statement's answer is waited for on the loop's thread (nothing else ready).
INLINE_WAIT = 0.002
#: Statements prepared per connection (each holds server memory for the session); any
#: other is sent unnamed, parsed on every call.
MAX_PREPARED = 128


def numbered(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` placeholders as PostgreSQL's ``$1``, ``$2``, ...
    (``ValueError`` for any other ``%``: named or escaped placeholders)."""
    parts = sql.split("%s")
    if any("%" in p for p in parts):
        raise ValueError("only %s placeholders")
    out = [parts[0]]
    for i, part in enumerate(parts[1:], start=1):
        out.append(f"${i}")
        out.append(part)
    return "".join(out)


def _error(res: pq.abc.PGresult, encoding: str) -> Exception:
    """The psycopg exception of a failed statement's result (``UniqueViolation``, ...)."""
    state = res.error_field(pq.DiagnosticField.SQLSTATE)
    message = res.error_message.decode(encoding, "replace").strip()
    try:
        cls = pg_errors.lookup(state.decode()) if state else pg_errors.DatabaseError
    except KeyError:
        cls = pg_errors.DatabaseError
    return cls(message)


class LeanStatements:
    """Statements on one psycopg ``AsyncConnection``'s libpq handle. Used by one task at a
    time (the appender's group commit), never beside psycopg's own cursors."""

    def __init__(self, aconn: Any) -> None:
        self.pgconn: pq.abc.PGconn = aconn.pgconn
        self._tx = Transformer(aconn)
        self._encoding = aconn.info.encoding
        self._names: dict[str, bytes] = {}
        #: Names are never used twice on a connection (one found gone is not reused).
        self._serial = 0
        self._fd = self.pgconn.socket
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_fd: int | None = None
        #: A wait was cut short (cancelled): the connection may hold an unread answer.
        self.broken = False

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Also wake the inline wait when the loop's own selector has events (asyncio's
        selector loops; another loop: only the connection's socket and the time limit)."""
        if loop is self._loop:
            return
        if self._loop_fd is not None:
            self._poll.unregister(self._loop_fd)
        self._loop, self._loop_fd = loop, None
        fileno = getattr(getattr(loop, "_selector", None), "fileno", None)
        if callable(fileno):
            self._loop_fd = int(fileno())
            self._poll.register(self._loop_fd, select.POLLIN)

    @property
    def idle(self) -> bool:
        """Whether the connection is outside a transaction block: a statement of its own
        is its own transaction (``first_column`` runs only then)."""
        return self.pgconn.transaction_status == pq.TransactionStatus.IDLE

    async def first_column(self, sql: str, params: Sequence[Any]) -> list[bytes | None]:
        """Run ``sql`` (psycopg's ``%s`` placeholders) with ``params`` as a transaction of
        its own (``idle`` connection); the first column of its rows as text. A failure
        raises psycopg's exception for its SQLSTATE (``UniqueViolation`` is an
        ``IntegrityError``); a broken connection, ``psycopg.OperationalError``.

        psycopg deallocates every prepared statement of the connection after a rollback
        it runs (``DEALLOCATE ALL``): a statement found gone is prepared again, once."""
        res = await self._result(sql, params)
        return [res.get_value(i, 0) for i in range(res.ntuples)]

    async def typed_rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """``first_column``'s statement, its rows with each value loaded by psycopg's own
        loaders for its column's type (the Python values a psycopg cursor's ``fetchall``
        gives)."""
        res = await self._result(sql, params)
        self._tx.set_pgresult(res)
        return self._tx.load_rows(0, res.ntuples, tuple)

    async def _result(self, sql: str, params: Sequence[Any]) -> pq.abc.PGresult:
        values = self._tx.dump_sequence(params, [PyFormat.TEXT] * len(params))
        try:
            return await self._run(sql, values)
        except pg_errors.InvalidSqlStatementName:  # nothing ran: prepared again, once
            self._names.clear()
            return await self._run(sql, values)

    async def _run(self, sql: str, values: Sequence[Any]) -> pq.abc.PGresult:
        name = self._names.get(sql)
        if name is None and len(self._names) >= MAX_PREPARED:
            self.pgconn.send_query_params(numbered(sql).encode(self._encoding), values)
        else:
            if name is None:
                self._serial += 1
                name = f"rv_{self._serial}".encode()
                self.pgconn.send_prepare(name, numbered(sql).encode(self._encoding))
                await self._results()
                self._names[sql] = name
            self.pgconn.send_query_prepared(name, values)
        return (await self._results())[0]

    async def _results(self) -> list[pq.abc.PGresult]:
        """Every result of the statement sent (it is then idle again); the first failed
        one raised."""
        pgconn = self.pgconn
        try:
            while pgconn.flush():  # a nonblocking connection: the rest once it can take it
                await self._wait(write=True)
            got: list[pq.abc.PGresult] = []
            while True:
                pgconn.consume_input()
                while not pgconn.is_busy():
                    res = pgconn.get_result()
                    if res is None:
                        failed = [r for r in got if r.status == pq.ExecStatus.FATAL_ERROR]
                        if failed:
                            raise _error(failed[0], self._encoding)
                        return got
                    got.append(res)
                await self._wait()
        except BaseException as exc:
            if not isinstance(exc, pg_errors.Error) or isinstance(exc, pg_errors.OperationalError):
                self.broken = True  # an answer may be left unread: not used again
            raise

    async def _wait(self, *, write: bool = False) -> None:
        loop = asyncio.get_running_loop()
        if not write and loop_is_alone():
            self._watch(loop)
            for fd, _ in self._poll.poll(INLINE_WAIT * 1000):
                if fd == self._fd:
                    return
        fut = loop.create_future()
        if write:
            loop.add_writer(self._fd, _done, fut)
        else:
            loop.add_reader(self._fd, _done, fut)
        try:
            await fut
        finally:
            if write:
                loop.remove_writer(self._fd)
            else:
                loop.remove_reader(self._fd)


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
