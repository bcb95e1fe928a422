"""Streaming a topic in pages: keyset pages on SQLite, a server-side cursor on PostgreSQL.

The server-side cursor runs in a reader thread inside one read transaction (one
consistent snapshot) and hands pages to the event loop through a small queue, so a
slow consumer holds back the producer instead of the whole log being materialised.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy.engine import Connection

from .append import StoredRow
from .database import Database

PageReader = Callable[[int, int], Awaitable[list[StoredRow]]]


async def keyset_pages(
    read: PageReader, from_offset: int, page_size: int
) -> AsyncIterator[list[StoredRow]]:
    """Pages from ``read(offset, limit)``, each starting after the last offset seen."""
    next_offset = from_offset
    while True:
        rows = await read(next_offset, page_size)
        if not rows:
            return
        yield rows
        if len(rows) < page_size:
            return
        next_offset = rows[-1][0] + 1


async def cursor_pages(
    db: Database, sql: str, params: tuple[Any, ...], page_size: int
) -> AsyncIterator[list[StoredRow]]:
    """Pages of ``sql`` from a server-side (named) cursor."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[list[StoredRow] | BaseException | None] = asyncio.Queue(maxsize=2)
    stop = threading.Event()

    def put(item: list[StoredRow]) -> bool:
        fut = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        while not stop.is_set():
            try:
                fut.result(timeout=0.2)
                return True
            except concurrent.futures.TimeoutError:
                continue
        fut.cancel()
        return False

    def produce(conn: Connection) -> None:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        cur = dbapi.cursor(name=f"rv_stream_{uuid.uuid4().hex[:12]}")
        try:
            cur.execute(sql, params)
            while not stop.is_set():
                rows = cur.fetchmany(page_size)
                if not rows or not put([tuple(r) for r in rows]):
                    return
        finally:
            cur.close()

    async def run() -> None:
        try:
            await db.read(produce)
        except BaseException as exc:  # handed to the consumer, raised there
            await queue.put(exc)
        else:
            await queue.put(None)

    task = loop.create_task(run())
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while not queue.empty():
            queue.get_nowait()
        with contextlib.suppress(BaseException):
            await task
