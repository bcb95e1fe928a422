"""Scheduled commands in the store: the ``rv_schedules`` table and the ``ScheduleStore`` port.

One row per schedule id: the target (topic, aggregate id), the command (type name and
JSON), when it is due, and ``generation``, which changes whenever the id is scheduled
again, so ``schedule:<id>:<generation>`` (the fired command's id) is new for every
reschedule and the same for every retry of one firing. ``status`` is ``pending`` or
``dead`` (dead-lettered); a fired schedule's row is deleted: what it did is in the target
log and in ``rv_commands``.

Producers write schedules inside the transaction of what produced them:
``write_statements`` gives the statements to run on the append's cursor or the
collector's batch connection. The scheduler claims due rows with a lease: ``next_at``
moves to the lease's end and ``owner`` names the claimer, in one compare-and-set
(PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so processes claim disjoint rows without waiting
on each other; SQLite serialises writers). A claim whose owner died expires with its lease
and is claimed again; the command id makes that retry land at most once.

Example::

    store = SqlScheduleStore(db)
    await store.write([ScheduledCommand("expire:o-1", "Order", "o-1", "Expire", "{}", due, "{}")])
    due = await store.claim("w-1", now_us, lease_us=30_000_000, limit=100, topics=["Order"])
    await store.fired([(s.id, s.generation) for s in due])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..ids import now_us
from ..scheduling import CancelSchedule, ScheduledCommand, ScheduleWrite
from . import tables
from .database import Database
from .signal import ChangeSignal

__all__ = [
    "SCHEDULES_CHANNEL",
    "SCHEDULES_PAYLOAD",
    "ScheduleFailure",
    "ScheduleStore",
    "SqlScheduleStore",
    "Status",
    "StoredSchedule",
    "schedules",
    "write_statements",
]

Status = Literal["pending", "dead"]
#: The PostgreSQL channel a commit that wrote schedules notifies (wakes other processes'
#: schedulers). Apart from the events' ``rv_events``: a scheduler hears no event commits.
SCHEDULES_CHANNEL = "rv_schedules"
#: The payload of such a NOTIFY (older versions sent it on ``rv_events``).
SCHEDULES_PAYLOAD = ":schedules"

#: Scheduled commands (see the module docstring). Times are microseconds since the epoch
#: by the App's clock; ``next_at`` is when the row can next be claimed (the due time, a
#: retry's backoff, or the end of a claim's lease).
schedules = sa.Table(
    "rv_schedules",
    tables.metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("aggregate_id", sa.String(400), nullable=False),
    sa.Column("command_type", sa.String(200), nullable=False),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("due_at", sa.BigInteger, nullable=False),
    sa.Column("next_at", sa.BigInteger, nullable=False),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("owner", sa.String(200)),
    sa.Column("meta", sa.Text),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.Index("ix_rv_schedules_next", "status", "next_at"),
)

_COLUMNS = (
    "id, topic, aggregate_id, command_type, command, due_at, generation, status, attempts, "
    "next_at, error, owner, meta, created_at"
)


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """One row of ``rv_schedules``."""

    id: str
    topic: str
    aggregate_id: str
    command_type: str
    command: str
    due_at_us: int
    generation: int
    status: str
    attempts: int
    next_at_us: int
    error: str | None
    owner: str | None
    meta: str | None
    created_at_us: int


@dataclass(frozen=True, slots=True)
class ScheduleFailure:
    """A firing that failed: retry at ``retry_at_us``, or dead-letter it (None)."""

    id: str
    generation: int
    error: str
    retry_at_us: int | None


def _row(r: Sequence[Any]) -> StoredSchedule:
    return StoredSchedule(
        str(r[0]),
        str(r[1]),
        str(r[2]),
        str(r[3]),
        str(r[4]),
        int(r[5]),
        int(r[6]),
        str(r[7]),
        int(r[8]),
        int(r[9]),
        r[10],
        r[11],
        r[12],
        int(r[13]),
    )


def _upsert_sql(db: Database) -> str:
    # A reschedule replaces everything, and its generation moves on even when the clock
    # did not (two writes in one microsecond), so its firing gets a new command id.
    return (
        "INSERT INTO rv_schedules (id, topic, aggregate_id, command_type, command, due_at, "
        "next_at, generation, status, attempts, error, owner, meta, created_at) "
        f"VALUES ({db.placeholders(8)}, 'pending', 0, NULL, NULL, {db.placeholders(2)}) "
        "ON CONFLICT (id) DO UPDATE SET topic = excluded.topic, "
        "aggregate_id = excluded.aggregate_id, command_type = excluded.command_type, "
        "command = excluded.command, due_at = excluded.due_at, next_at = excluded.next_at, "
        "generation = CASE WHEN excluded.generation > rv_schedules.generation "
        "THEN excluded.generation ELSE rv_schedules.generation + 1 END, "
        "status = 'pending', attempts = 0, error = NULL, owner = NULL, "
        "meta = excluded.meta, created_at = excluded.created_at"
    )


def write_statements(
    db: Database, writes: Iterable[ScheduleWrite], *, notify: bool = False
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """The statements (SQL, rows of parameters for ``executemany``) that store ``writes``
    in the caller's transaction; the last write of an id wins. ``notify`` (PostgreSQL)
    adds the commit-time NOTIFY that wakes other processes' schedulers (an append's own
    NOTIFY does that already)."""
    last: dict[str, ScheduleWrite] = {}
    for w in writes:
        last.pop(w.id, None)  # keep the order of the last writes
        last[w.id] = w
    if not last:
        return []
    generation = now_us()
    upserts = [
        (
            w.id,
            w.topic,
            w.aggregate_id,
            w.command_type,
            w.command,
            w.due_at_us,
            w.due_at_us,
            generation,
            w.meta,
            generation,
        )
        for w in last.values()
        if isinstance(w, ScheduledCommand)
    ]
    cancels = [(w.id,) for w in last.values() if isinstance(w, CancelSchedule)]
    out: list[tuple[str, list[tuple[Any, ...]]]] = []
    if upserts:
        out.append((_upsert_sql(db), upserts))
    if cancels:
        out.append((f"DELETE FROM rv_schedules WHERE id = {db.mark}", cancels))
    if notify and not db.is_sqlite:
        out.append(
            (f"SELECT pg_notify({db.mark}, {db.mark})", [(SCHEDULES_CHANNEL, SCHEDULES_PAYLOAD)])
        )
    return out


def write_sync(db: Database, conn: Connection, writes: Iterable[ScheduleWrite]) -> bool:
    """``write_statements`` run on a SQLAlchemy connection (with the NOTIFY); True if
    anything was written."""
    statements = write_statements(db, writes, notify=True)
    for sql, rows in statements:
        conn.exec_driver_sql(sql, rows)
    return bool(statements)


class ScheduleStore(Protocol):
    """The scheduled commands of a store (``SqlScheduleStore`` implements it)."""

    @property
    def changes(self) -> int:
        """Schedule writes signalled so far (see ``wait_for_change``)."""
        ...

    def signal(self) -> None:
        """Note that schedules were written (called after such a commit)."""
        ...

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        """Wait for schedules written after ``changes == seen``: by this process, and by
        any process where the store can tell (PostgreSQL's NOTIFY); False on timeout.
        Commits that wrote no schedule do not wake it."""
        ...

    async def write(self, writes: Sequence[ScheduleWrite]) -> None:
        """Store (replace) or cancel schedules in a transaction of their own (producers
        write theirs with what produced them instead)."""
        ...

    async def claim(
        self, worker: str, now_us: int, *, lease_us: int, limit: int, topics: Sequence[str]
    ) -> list[StoredSchedule]:
        """Lease up to ``limit`` pending schedules for ``topics`` due by ``now_us`` to
        ``worker`` until ``now_us + lease_us``, earliest first; no two claims get one row
        while its lease runs."""
        ...

    async def fired(self, done: Sequence[tuple[str, int]]) -> None:
        """Delete the schedules ``(id, generation)`` whose commands landed (a schedule
        rescheduled since keeps its new generation)."""
        ...

    async def failed(self, worker: str, failures: Sequence[ScheduleFailure]) -> None:
        """Record failed firings of ``worker``'s claims: retry later or dead-letter."""
        ...

    async def next_due(self, topics: Sequence[str]) -> int | None:
        """When the earliest pending schedule for ``topics`` can be claimed (None: none)."""
        ...

    async def find(
        self, status: Status | None = None, *, ids: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredSchedule]:
        """Schedules (of one status, or of ``ids``), earliest ``next_at`` first."""
        ...

    async def redrive(self, ids: Sequence[str] | None, now_us: int) -> int:
        """Make dead-lettered schedules (``ids``, or all) pending again, due at
        ``now_us`` with no attempts; returns how many."""
        ...

    async def cancel(self, ids: Sequence[str]) -> int:
        """Delete schedules (pending or dead); returns how many there were."""
        ...


class SqlScheduleStore:
    """``ScheduleStore`` on the SQL database. ``signal`` is called (on the event loop)
    after a commit wrote schedules: this process's own writes, appends and collector
    batches, and other processes' on PostgreSQL (their commit's NOTIFY ``:schedules``,
    heard once ``listen`` started the store's listener). A scheduler waits on these
    alone: an ordinary commit costs it nothing."""

    def __init__(self, db: Database, listen: Callable[[], None] | None = None) -> None:
        self.db = db
        self._listen = listen
        self._changes = ChangeSignal()

    @property
    def changes(self) -> int:
        return self._changes.count

    def signal(self) -> None:
        self._changes.fire()

    def _changed(self) -> None:
        self.signal()

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        if self._listen is not None:
            self._listen()
        return await self._changes.wait(timeout, seen)

    async def write(self, writes: Sequence[ScheduleWrite]) -> None:
        if not writes:
            return
        await self.db.write(lambda conn: write_sync(self.db, conn, writes))
        self._changed()

    async def claim(
        self, worker: str, now_us: int, *, lease_us: int, limit: int, topics: Sequence[str]
    ) -> list[StoredSchedule]:
        if not topics:
            return []
        m, n = self.db.mark, int(limit)
        due = (
            f"status = 'pending' AND next_at <= {m} AND topic IN "
            f"({self.db.placeholders(len(topics))}) ORDER BY next_at LIMIT {n}"
        )
        until = now_us + lease_us

        def sqlite(conn: Connection) -> list[StoredSchedule]:
            # the writer's BEGIN IMMEDIATE makes the read and the update one step
            got = [
                _row(r)
                for r in conn.exec_driver_sql(
                    f"SELECT {_COLUMNS} FROM rv_schedules WHERE {due}", (now_us, *topics)
                ).all()
            ]
            if got:
                conn.exec_driver_sql(
                    f"UPDATE rv_schedules SET owner = {m}, next_at = {m} WHERE id = {m}",
                    [(worker, until, s.id) for s in got],
                )
            return got

        def postgres(conn: Connection) -> list[StoredSchedule]:
            # rows another claim has locked are skipped, not waited for; once it commits
            # their next_at is in the future
            sql = (
                f"UPDATE rv_schedules SET owner = {m}, next_at = {m} WHERE id IN "
                f"(SELECT id FROM rv_schedules WHERE {due} FOR UPDATE SKIP LOCKED) "
                f"RETURNING {_COLUMNS}"
            )
            params = (worker, until, now_us, *topics)
            got = [_row(r) for r in conn.exec_driver_sql(sql, params).all()]
            return sorted(got, key=lambda s: (s.due_at_us, s.id))

        return await self.db.write(sqlite if self.db.is_sqlite else postgres)

    async def fired(self, done: Sequence[tuple[str, int]]) -> None:
        if not done:
            return
        m = self.db.mark
        sql = f"DELETE FROM rv_schedules WHERE id = {m} AND generation = {m}"
        await self.db.write(lambda conn: conn.exec_driver_sql(sql, list(done)))

    async def failed(self, worker: str, failures: Sequence[ScheduleFailure]) -> None:
        if not failures:
            return
        m = self.db.mark
        sql = (
            f"UPDATE rv_schedules SET attempts = attempts + 1, error = {m}, owner = NULL, "
            f"next_at = {m}, status = {m} WHERE id = {m} AND generation = {m} AND owner = {m}"
        )
        now = now_us()
        rows = [
            (
                f.error[:4000],
                now if f.retry_at_us is None else f.retry_at_us,
                "dead" if f.retry_at_us is None else "pending",
                f.id,
                f.generation,
                worker,
            )
            for f in failures
        ]
        await self.db.write(lambda conn: conn.exec_driver_sql(sql, rows))

    async def next_due(self, topics: Sequence[str]) -> int | None:
        if not topics:
            return None
        sql = (
            "SELECT MIN(next_at) FROM rv_schedules WHERE status = 'pending' "
            f"AND topic IN ({self.db.placeholders(len(topics))})"
        )
        got = await self.db.read(lambda conn: conn.exec_driver_sql(sql, tuple(topics)).scalar())
        return None if got is None else int(got)

    async def find(
        self, status: Status | None = None, *, ids: Sequence[str] | None = None, limit: int = 1000
    ) -> list[StoredSchedule]:
        m = self.db.mark
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append(f"status = {m}")
            params.append(status)
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({self.db.placeholders(len(ids))})")
            params.extend(ids)
        sql = f"SELECT {_COLUMNS} FROM rv_schedules"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY next_at, id LIMIT {int(limit)}"
        return await self.db.read(
            lambda conn: [_row(r) for r in conn.exec_driver_sql(sql, tuple(params)).all()]
        )

    async def redrive(self, ids: Sequence[str] | None, now_us: int) -> int:
        m = self.db.mark
        sql = (
            f"UPDATE rv_schedules SET status = 'pending', attempts = 0, owner = NULL, "
            f"next_at = {m} WHERE status = 'dead'"
        )
        params: tuple[Any, ...] = (now_us,)
        if ids is not None:
            if not ids:
                return 0
            sql += f" AND id IN ({self.db.placeholders(len(ids))})"
            params += tuple(ids)

        def work(conn: Connection) -> int:
            n = int(conn.exec_driver_sql(sql, params).rowcount)
            if n and not self.db.is_sqlite:
                conn.exec_driver_sql(
                    f"SELECT pg_notify({m}, {m})", (SCHEDULES_CHANNEL, SCHEDULES_PAYLOAD)
                )
            return n

        n = await self.db.write(work)
        if n:
            self._changed()
        return n

    async def cancel(self, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        sql = f"DELETE FROM rv_schedules WHERE id IN ({self.db.placeholders(len(ids))})"
        return int(await self.db.write(lambda conn: conn.exec_driver_sql(sql, tuple(ids)).rowcount))
