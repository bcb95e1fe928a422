"""PostgreSQL appends on an asyncio connection (psycopg's AsyncConnection, opened through
SQLAlchemy's async engine): the group commit talks to the server from the event loop,
with no hop to a worker thread. Same SQL and guarantees as ``append.Appender``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import ConcurrencyError, StoreError
from .append import COPY_THRESHOLD, Appender, AppendRequest, AppendResult, StoredRow, TableInfo

#: Up to this many rows one statement reserves offsets and inserts (a CTE): a lone
#: append is then a single autocommitted statement, one round trip.
_CTE_ROWS = 16


class AsyncAppender:
    """Writes groups of append requests on one long-lived async connection."""

    def __init__(self, appender: Appender, url: sa.URL) -> None:
        self.sync = appender  # SQL text, table lookup, error classes
        self.db = appender.db
        self.url = url
        self._engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            if self._engine is None:
                self._engine = create_async_engine(self.url)
            self._conn = await self._engine.connect()
            raw = await self._conn.get_raw_connection()
            assert raw.driver_connection is not None
            # Autocommit: a lone append is one statement, its own transaction (one round
            # trip); groups open an explicit transaction.
            await raw.driver_connection.set_autocommit(True)
        raw = await self._conn.get_raw_connection()
        return raw.driver_connection

    async def close(self) -> None:
        """Close the connection and dispose the async engine."""
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def group(self, reqs: list[AppendRequest]) -> list[AppendResult | Exception]:
        """Append ``reqs`` in one transaction; clashes fail only their request."""
        aconn = await self._connection()
        try:
            cur = aconn.cursor()
            if len(reqs) == 1 and reqs[0].command_id is None and len(reqs[0].rows) <= _CTE_ROWS:
                return [await self._one(cur, reqs[0])]  # one atomic statement
            async with aconn.transaction():
                if len(reqs) == 1:
                    return [await self._one(cur, reqs[0])]
                return await self._many(aconn, cur, reqs)
        except self.db.operational_errors as exc:
            if self._conn is not None:
                await self._conn.invalidate()
            raise StoreError(f"store write failed: {exc}") from exc

    async def _many(
        self, aconn: Any, cur: Any, reqs: list[AppendRequest]
    ) -> list[AppendResult | Exception]:
        order = sorted(range(len(reqs)), key=lambda i: reqs[i].topic)  # lock order
        results: list[AppendResult | Exception | None] = [None] * len(reqs)
        try:
            async with aconn.transaction():  # a savepoint
                done = await self._all(cur, [reqs[i] for i in order])
            for i, res in zip(order, done, strict=True):
                results[i] = res
        except self.db.integrity_errors:
            for i in order:
                try:
                    async with aconn.transaction():
                        results[i] = await self._one(cur, reqs[i])
                except ConcurrencyError as exc:
                    results[i] = exc
        return [r for r in results if r is not None]

    async def _bump(self, cur: Any, topic: str, n: int) -> int:
        await cur.execute(
            "UPDATE rv_topics SET head = head + %s WHERE name = %s RETURNING head, "
            "pg_notify('rv_events', name || ':' || head::text)",
            (n, topic),
        )
        row = await cur.fetchone()
        return int(row[0]) - n + 1

    async def _insert(self, cur: Any, info: TableInfo, rows: Sequence[StoredRow]) -> None:
        if len(rows) < COPY_THRESHOLD:
            await cur.executemany(info.insert_sql, rows)
            return
        q = self.db.q
        cols = ", ".join(q(c) for c in info.columns)
        async with cur.copy(f"COPY {q(info.table)} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(info.pg_types)
            for row in rows:
                await copy.write_row(row)

    async def _one(self, cur: Any, req: AppendRequest) -> AppendResult:
        if req.command_id is not None:
            try:
                async with cur.connection.transaction():
                    await cur.execute(
                        self.sync.command_sql, (req.command_id, req.topic, req.aggregate_id)
                    )
            except self.db.integrity_errors:
                return AppendResult(req.topic, 0, -1, duplicate=True)
        info = self.sync.table_of(req.topic)
        n = len(req.rows)
        try:
            if n <= _CTE_ROWS:
                params = (req.topic, *(v for r in req.rows for v in r))
                await cur.execute(self.sync.cte_sql(info, n), params)
                got = await cur.fetchall()
                if len(got) != n:
                    raise StoreError(f"topic {req.topic!r} is not registered in the store")
                first = min(int(o) for (o,) in got)
                rows = [(first + i, *r) for i, r in enumerate(req.rows)]
            else:
                first = await self._bump(cur, req.topic, n)
                rows = [(first + i, *r) for i, r in enumerate(req.rows)]
                await self._insert(cur, info, rows)
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        return AppendResult(req.topic, first, first + n - 1, rows)

    async def _all(self, cur: Any, reqs: list[AppendRequest]) -> list[AppendResult]:
        commands = [(r.command_id, r.topic, r.aggregate_id) for r in reqs if r.command_id]
        if commands:
            await cur.executemany(self.sync.command_sql, commands)
        results: list[AppendResult] = []
        i = 0
        while i < len(reqs):  # reqs are sorted by topic
            topic = reqs[i].topic
            j = i
            while j < len(reqs) and reqs[j].topic == topic:
                j += 1
            off = await self._bump(cur, topic, sum(len(r.rows) for r in reqs[i:j]))
            all_rows: list[StoredRow] = []
            for req in reqs[i:j]:
                rows = [(off + k, *r) for k, r in enumerate(req.rows)]
                results.append(AppendResult(topic, off, off + len(rows) - 1, rows))
                off += len(rows)
                all_rows.extend(rows)
            await self._insert(cur, self.sync.table_of(topic), all_rows)
            i = j
        return results
