"""Looking command ids up in ``rv_commands`` (the records the appenders write).

Every command sent with an id is looked up before its handler runs, so the lookups of
commands in flight at once are batched like appends are: whatever queued while the
previous read ran is answered by the next single ``IN (...)`` read. On a SQLite file
the read is done inline instead (a primary-key read under WAL never waits for a writer,
and the hop to a reader thread would cost more than the read).

Example::

    lookup = CommandLookup(db)
    record = await lookup.find("cmd-1")  # None: the id never landed
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection

from .append import CommandRecord
from .database import Database

#: Ids per ``IN (...)`` read (well under SQLite's bound-parameter limit).
_MAX_IDS = 500


#: PostgreSQL's lookup of any number of ids through libpq: one prepared statement.
LOOKUP_SQL = (
    "SELECT command_id, topic, aggregate_id, first_offset, last_offset, version "
    "FROM rv_commands WHERE command_id = ANY(%s::text[])"
)


class CommandLookup:
    """Answers ``find(command_id)`` from ``rv_commands``, batching concurrent lookups."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: How PostgreSQL reads ``LOOKUP_SQL`` on the event loop (through libpq:
        #: ``pgasync.AsyncAppender.read_typed``), instead of a reader thread's hop there
        #: and back (~0.3 ms per command sent with an id); set by the store.
        self.read_rows: Callable[[str, Sequence[Any]], Awaitable[list[tuple[Any, ...]]]] | None = (
            None
        )
        self._queued: dict[str, list[asyncio.Future[CommandRecord | None]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def find(self, command_id: str) -> CommandRecord | None:
        """The record of the append that carried ``command_id``; None if none has."""
        if self.db.is_sqlite and not self.db.is_memory:
            read = partial(self._read, ids=[command_id])
            return self.db.read_sync(read, autocommit=True).get(command_id)  # one SELECT
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[CommandRecord | None] = loop.create_future()
        self._queued.setdefault(command_id, []).append(fut)
        if self._reader is None:
            self._reader = loop.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self._queued:
                ids = list(self._queued)[:_MAX_IDS]
                waiting = {i: self._queued.pop(i) for i in ids}
                try:
                    if self.read_rows is not None:
                        found = _records(await self.read_rows(LOOKUP_SQL, (ids,)))
                    else:
                        found = await self.db.read(partial(self._read, ids=ids))
                except BaseException as exc:
                    for futs in waiting.values():
                        for f in futs:
                            if not f.done():
                                f.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for cid, futs in waiting.items():
                    for f in futs:
                        if not f.done():
                            f.set_result(found.get(cid))
        finally:
            self._reader = None

    def _read(self, conn: Connection, ids: list[str]) -> dict[str, CommandRecord]:
        among, params = self.db.member_of("command_id", ids)
        sql = (
            "SELECT command_id, topic, aggregate_id, first_offset, last_offset, version "
            f"FROM rv_commands WHERE {among}"
        )
        cur: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cur.execute(sql, tuple(params))
        return _records(cur.fetchall())


def _records(rows: Sequence[tuple[Any, ...]]) -> dict[str, CommandRecord]:
    """``rv_commands`` rows (``LOOKUP_SQL``'s columns) -> records by command id."""
    return {str(r[0]): _record(r) for r in rows}


def _record(row: tuple[Any, ...]) -> CommandRecord:
    cid, topic, aggregate_id, first, last, version = row
    return CommandRecord(
        str(cid),
        str(topic),
        aggregate_id,
        None if first is None else int(first),
        None if last is None else int(last),
        None if version is None else int(version),
    )
