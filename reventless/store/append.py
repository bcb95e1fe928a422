"""The append hot path: one transaction for a group of append requests.

It talks to the DBAPI cursor directly: SQLAlchemy's per-statement bookkeeping (and its
compiled SAVEPOINT clauses) cost more than the SQL here.

Offsets: SQLite serialises writers (``BEGIN IMMEDIATE``), so the next offset is the
largest one plus one (``_offset`` is the rowid: an O(log n) lookup and no extra page
to write). PostgreSQL bumps the topic's counter row in ``rv_topics``; its row lock is
held to commit, so appends to one topic commit in offset order and a reader never sees
offset N+1 before N. Topics are locked in name order, so two groups never deadlock.
Retention must never delete a topic's newest row (SQLite derives the head from it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConcurrencyError, StoreError
from .database import Database

#: A full stored row: META values (``codec.META_NAMES`` order) then the field values.
StoredRow = tuple[Any, ...]

#: PostgreSQL COPY pays off from about this many rows in one statement.
COPY_THRESHOLD = 64
#: Up to this many rows, a lone PostgreSQL append is one INSERT ... SELECT with its
#: offset reservation in a CTE.
_CTE_MAX_ROWS = 16
NOTIFY_CHANNEL = "rv_events"


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


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What the appender needs to know about a topic's table."""

    table: str
    columns: tuple[str, ...]
    pg_types: tuple[str, ...]
    insert_sql: str


class Appender:
    """Writes groups of append requests; ``table_of`` maps a topic to its table."""

    def __init__(self, db: Database, table_of: Callable[[str], TableInfo]) -> None:
        self.db = db
        self.table_of = table_of
        self._cte_cache: dict[tuple[str, int], str] = {}

    @property
    def command_sql(self) -> str:
        """Records a command id (its parameter marks depend on the opened driver)."""
        return (
            "INSERT INTO rv_commands (command_id, topic, aggregate_id) "
            f"VALUES ({self.db.placeholders(3)})"
        )

    def group(self, cur: Any, *, reqs: list[AppendRequest]) -> list[AppendResult | Exception]:
        """Append ``reqs`` in the caller's transaction; clashes fail only their request."""
        if len(reqs) == 1:
            return [self._careful(cur, reqs[0], savepoint=False)]
        order = sorted(range(len(reqs)), key=lambda i: reqs[i].topic)  # lock order
        results: list[AppendResult | Exception | None] = [None] * len(reqs)
        cur.execute("SAVEPOINT rv_group")
        try:
            for i, res in zip(order, self._all(cur, [reqs[i] for i in order]), strict=True):
                results[i] = res
        except self.db.integrity_errors:
            cur.execute("ROLLBACK TO SAVEPOINT rv_group")
            for i in order:
                results[i] = self._careful(cur, reqs[i], savepoint=True)
        cur.execute("RELEASE SAVEPOINT rv_group")
        return [r for r in results if r is not None]

    def _careful(
        self, cur: Any, req: AppendRequest, *, savepoint: bool
    ) -> AppendResult | Exception:
        """One request on its own; a clash undoes only this request."""
        if savepoint:
            cur.execute("SAVEPOINT rv_one")
        try:
            result: AppendResult | Exception = self._one(cur, req)
        except ConcurrencyError as exc:
            if not savepoint:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT rv_one")
            result = exc
        if savepoint:
            cur.execute("RELEASE SAVEPOINT rv_one")
        return result

    def _bump(self, cur: Any, topic: str, n: int) -> int:
        """Reserve ``n`` offsets inside the appending transaction; returns the first."""
        if self.db.is_sqlite:
            cur.execute(f"SELECT MAX(_offset) FROM {self.db.q(self.table_of(topic).table)}")
            return int(cur.fetchone()[0] or 0) + 1
        mark = self.db.mark
        # The same round trip queues the commit-time NOTIFY "topic:head" (dropped with
        # the savepoint if this append is rolled back): collectors of every process on
        # the store wake up (LISTEN rv_events) instead of polling.
        cur.execute(
            f"UPDATE rv_topics SET head = head + {mark} WHERE name = {mark} "
            f"RETURNING head, pg_notify('{NOTIFY_CHANNEL}', name || ':' || head::text)",
            (n, topic),
        )
        return int(cur.fetchone()[0]) - n + 1

    def _insert(self, cur: Any, info: TableInfo, rows: Sequence[StoredRow]) -> None:
        if len(rows) == 1:
            cur.execute(info.insert_sql, rows[0])
            return
        if self.db.is_sqlite or len(rows) < COPY_THRESHOLD:
            cur.executemany(info.insert_sql, rows)
            return
        q = self.db.q
        cols = ", ".join(q(c) for c in info.columns)
        with cur.copy(f"COPY {q(info.table)} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(info.pg_types)
            for row in rows:
                copy.write_row(row)

    def _one(self, cur: Any, req: AppendRequest) -> AppendResult:
        if req.command_id is not None:
            cur.execute("SAVEPOINT rv_cmd")
            try:
                cur.execute(self.command_sql, (req.command_id, req.topic, req.aggregate_id))
            except self.db.integrity_errors:
                cur.execute("ROLLBACK TO SAVEPOINT rv_cmd")
                cur.execute("RELEASE SAVEPOINT rv_cmd")
                return AppendResult(req.topic, 0, -1, duplicate=True)
            cur.execute("RELEASE SAVEPOINT rv_cmd")
        info = self.table_of(req.topic)
        n = len(req.rows)
        try:
            if not self.db.is_sqlite and n <= _CTE_MAX_ROWS:
                # One round trip: reserve the offsets and insert in a single statement.
                params = (req.topic, *(v for r in req.rows for v in r))
                cur.execute(self.cte_sql(info, n), params)
                got = cur.fetchall()
                if len(got) != n:
                    raise StoreError(f"topic {req.topic!r} is not registered in the store")
                first = min(int(o) for (o,) in got)
                rows = [(first + i, *r) for i, r in enumerate(req.rows)]
            else:
                first = self._bump(cur, req.topic, n)
                rows = [(first + i, *r) for i, r in enumerate(req.rows)]
                self._insert(cur, info, rows)
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        return AppendResult(req.topic, first, first + n - 1, rows)

    def cte_sql(self, info: TableInfo, n: int) -> str:
        """PostgreSQL: reserve ``n`` offsets and insert ``n`` rows in one statement."""
        key = (info.table, n)
        sql = self._cte_cache.get(key)
        if sql is None:
            q = self.db.q
            cols = info.columns[1:]  # all but _offset
            types = info.pg_types[1:]
            values = ", ".join(
                f"({k}, " + ", ".join(f"%s::{t}" for t in types) + ")" for k in range(1, n + 1)
            )
            names = ", ".join(f"c{i}" for i in range(len(cols)))
            sql = self._cte_cache[key] = (
                "WITH h AS (UPDATE rv_topics SET head = head + "
                f"{n} WHERE name = %s RETURNING head, "
                f"pg_notify('{NOTIFY_CHANNEL}', name || ':' || head::text)) "
                f"INSERT INTO {q(info.table)} ({', '.join(q(c) for c in info.columns)}) "
                f"SELECT h.head - {n} + v.k, {names.replace('c', 'v.c')} "
                f"FROM h, (VALUES {values}) AS v(k, {names}) RETURNING _offset"
            )
        return sql

    def _all(self, cur: Any, reqs: list[AppendRequest]) -> list[AppendResult]:
        """Everything at once: one offset reservation and one bulk insert per topic."""
        commands = [(r.command_id, r.topic, r.aggregate_id) for r in reqs if r.command_id]
        if commands:
            cur.executemany(self.command_sql, commands)
        results: list[AppendResult] = []
        i = 0
        while i < len(reqs):  # reqs are sorted by topic
            topic = reqs[i].topic
            j = i
            while j < len(reqs) and reqs[j].topic == topic:
                j += 1
            off = self._bump(cur, topic, sum(len(r.rows) for r in reqs[i:j]))
            all_rows: list[StoredRow] = []
            for req in reqs[i:j]:
                rows = [(off + k, *r) for k, r in enumerate(req.rows)]
                results.append(AppendResult(topic, off, off + len(rows) - 1, rows))
                off += len(rows)
                all_rows.extend(rows)
            self._insert(cur, self.table_of(topic), all_rows)
            i = j
        return results
