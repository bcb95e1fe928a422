"""What collectors keep in the store: checkpoints, dead letters, and the commit of a batch.

A collector's batch commits through one call, ``CollectorStore.commit``: in ONE
transaction it checks the lease fence (a leased member still holds the partition at its
epoch, else ``LeaseLostError`` and nothing lands), runs the read model's handlers against
the rows of that transaction (``apply`` gets a ``RowWriter``), records dead letters,
stores the schedules the batch's handlers returned and moves the partition's
checkpoint. Checkpoints are per (component, topic, partition): the last offset processed,
every earlier event of that partition done. Dead letters park the later events of their
aggregate until redriven.

Example::

    store = SqlCollectorStore(db)
    checkpoints, parked = await store.load("order_summaries")
    await store.commit("order_summaries", Progress("Order", 0, 42), failed=[...])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Protocol

from sqlalchemy.engine import Connection

from ..deadletter import DeadLetter
from ..errors import CheckpointMovedError, LeaseLostError
from ..ids import now_us
from ..scheduling import ScheduleWrite
from .database import Database, alone_soon, loop_is_alone
from .leases import holds_sync
from .readmodel import RowTable, RowWriter
from .schedules import write_sync

Part = tuple[str, int]  # (topic, partition)
Parked = set[tuple[str, str]]  # (topic, aggregate id)


@dataclass(frozen=True, slots=True)
class Fence:
    """A leased member's claim on a partition: it commits only while the store still
    records ``worker`` as the owner at ``epoch``."""

    worker: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a batch moves a partition: its checkpoint becomes ``offset``; ``fence`` (a
    leased member's) is checked first in the same transaction.

    ``after`` is the checkpoint the batch started from (the collector's view). If the
    stored one is past it, the batch's events were processed already (a commit that
    landed although its answer was lost with the connection) and the commit raises
    ``CheckpointMovedError``, writing nothing: applying them twice would corrupt a read
    model."""

    topic: str
    partition: int
    offset: int
    fence: Fence | None = None
    after: int | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """An event a component gives up on (for now): recorded as a dead letter."""

    topic: str
    offset: int
    aggregate_id: str | None
    msg_id: str
    event_type: str
    error: str
    attempts: int


#: Runs a batch's handlers inside the commit (on the store's writer thread): returns the
#: failures to record, or None to leave the batch (nothing is written, ``commit`` is False).
Apply = Callable[[RowWriter], Sequence[Failure] | None]
#: One write statement of its own and the first column of its rows as text
#: (``AsyncAppender.write_first_column``).
LeanWrite = Callable[[str, Sequence[Any]], Awaitable[list[bytes | None]]]


class CollectorStore(Protocol):
    """The collector side of a store (``SqlCollectorStore`` implements it)."""

    @property
    def overlap_commits(self) -> bool:
        """Whether a catch-up handles its next page while a page's checkpoint commit is
        in flight (``Collector.pipelined``): where that commit waits off the event
        loop's thread, so the wait can overlap handling."""
        ...

    async def load(self, component: str) -> tuple[dict[Part, int], Parked]:
        """Every checkpoint of ``component`` and its parked aggregates (one snapshot)."""
        ...

    async def load_partition(self, component: str, part: Part) -> tuple[int, Parked]:
        """One partition's checkpoint (0: none yet) and the parked aggregates."""
        ...

    async def commit(
        self,
        component: str,
        progress: Progress | None,
        *,
        failed: Sequence[Failure] = (),
        fence: tuple[Part, Fence] | None = None,
        rows: RowTable | None = None,
        apply: Apply | None = None,
        schedules: Sequence[ScheduleWrite] = (),
    ) -> bool:
        """One transaction: the fence (``progress.fence``, or ``fence`` for a redo without
        progress), ``apply`` on ``rows``, dead letters, the schedules the batch's handlers
        returned, the checkpoint. False (nothing written) when ``apply`` returned None."""
        ...

    async def dead_letters(self, component: str | None = None) -> list[DeadLetter]:
        """Open dead letters (of every component when None), per aggregate in offset order."""
        ...

    async def resolve(self, letter_id: int) -> None:
        """Remove a dead letter after a successful redrive."""
        ...

    async def retry_failed(self, letter_id: int, error: str) -> None:
        """Record another failed attempt of a dead letter."""
        ...


class SqlCollectorStore:
    """``CollectorStore`` on the SQL database (``rv_checkpoints``, ``rv_dead_letters``,
    fenced by ``rv_collector_leases``)."""

    def __init__(self, db: Database, on_schedules: Callable[[], None] | None = None) -> None:
        self.db = db
        #: Called (on the event loop) after a batch that wrote schedules committed.
        self.on_schedules = on_schedules
        #: PostgreSQL: one write statement of its own from the event loop, through libpq
        #: (``AsyncAppender.write_first_column``; set by the store as it opens): a
        #: checkpoint-only commit then needs no hop to the writer thread and back.
        self.lean_write: LeanWrite | None = None

    @property
    def overlap_commits(self) -> bool:
        """True on PostgreSQL, where a checkpoint-only commit is a statement sent from the
        event loop (``lean_write``), whose answer comes while the loop works on. Not on
        SQLite: a checkpoint commit runs on the loop's thread when the loop has nothing
        else to do, and a hop to the writer thread while the loop handles a page costs
        the loop more than the fsync it would overlap (the two threads trade the GIL: a
        per-event catch-up ran at 0.85-1.03x with it, BENCHMARKS.md "Commits behind
        handling")."""
        return not self.db.is_sqlite

    # The statements depend on the driver's quoting and parameter style, known once the
    # database is open: built at first use.
    @cached_property
    def _checkpoint_sql(self) -> str:
        q = self.db.q
        return (
            f"INSERT INTO rv_checkpoints (component, topic, {q('partition')}, {q('offset')}) "
            f"VALUES ({self.db.placeholders(4)}) "
            f"ON CONFLICT (component, topic, {q('partition')}) "
            f"DO UPDATE SET {q('offset')} = excluded.{q('offset')}"
        )

    @cached_property
    def _advance_sql(self) -> str:
        """``_checkpoint_sql`` only where the stored checkpoint is not past ``after``."""
        q = self.db.q
        return f"{self._checkpoint_sql} WHERE rv_checkpoints.{q('offset')} <= {self.db.mark}"

    @cached_property
    def _stored_sql(self) -> str:
        """One partition's stored checkpoint (component, topic, partition)."""
        q, m = self.db.q, self.db.mark
        return (
            f"SELECT {q('offset')} FROM rv_checkpoints WHERE component = {m} AND topic = {m} "
            f"AND {q('partition')} = {m}"
        )

    @cached_property
    def _advance_returning_sql(self) -> str:
        """``_advance_sql`` returning the row it wrote (none: the stored one is past)."""
        return f"{self._advance_sql} RETURNING {self.db.q('offset')}"

    @cached_property
    def _dead_letter_sql(self) -> str:
        q = self.db.q
        return (
            f"INSERT INTO rv_dead_letters (component, topic, {q('offset')}, aggregate_id, "
            "msg_id, event_type, error, attempts, created_at) "
            f"VALUES ({self.db.placeholders(9)}) "
            f"ON CONFLICT (component, topic, {q('offset')}) DO NOTHING"
        )

    # -- reading ---------------------------------------------------------------------------

    async def load(self, component: str) -> tuple[dict[Part, int], Parked]:
        def work(conn: Connection) -> tuple[dict[Part, int], Parked]:
            q = self.db.q
            sql = (
                f"SELECT topic, {q('partition')}, {q('offset')} FROM rv_checkpoints "
                f"WHERE component = {self.db.mark}"
            )
            got = {
                (str(t), int(p)): int(o)
                for t, p, o in conn.exec_driver_sql(sql, (component,)).all()
            }
            return got, self._parked_sync(conn, component)

        return await self.db.read(work)

    async def load_partition(self, component: str, part: Part) -> tuple[int, Parked]:
        def work(conn: Connection) -> tuple[int, Parked]:
            cp = conn.exec_driver_sql(self._stored_sql, (component, *part)).scalar()
            return int(cp or 0), self._parked_sync(conn, component)

        return await self.db.read(work)

    def _parked_sync(self, conn: Connection, component: str) -> Parked:
        sql = (
            "SELECT DISTINCT topic, aggregate_id FROM rv_dead_letters "
            f"WHERE component = {self.db.mark} AND aggregate_id IS NOT NULL"
        )
        return {(str(t), str(a)) for t, a in conn.exec_driver_sql(sql, (component,)).all()}

    # -- the batch commit --------------------------------------------------------------------

    async def commit(
        self,
        component: str,
        progress: Progress | None,
        *,
        failed: Sequence[Failure] = (),
        fence: tuple[Part, Fence] | None = None,
        rows: RowTable | None = None,
        apply: Apply | None = None,
        schedules: Sequence[ScheduleWrite] = (),
    ) -> bool:
        if (
            progress is not None
            and progress.fence is None
            and fence is None
            and apply is None
            and not failed
            and not schedules
        ):
            # Only a checkpoint moves (a page of side effects or batch handlers): one
            # statement. On a SQLite file whose write lock is free, with no other task
            # ready to run, it commits on the loop's thread, as a lone append does (the
            # hop to the writer thread and back cost ~1 ms a page while helpers read
            # ahead; a failure rolls back and is the writer's typed error); else on the
            # writer, in a transaction of plain BEGIN and COMMIT. On PostgreSQL it is its
            # own transaction: one round trip instead of BEGIN, it and COMMIT.
            advance = partial(self._advance, component, progress)
            if self.db.can_inline and loop_is_alone() and self.db.try_inline_write():
                self.db.write_raw_sync(advance, locked=True)
            elif self.lean_write is not None:
                await self._advance_lean(self.lean_write, component, progress)
            else:
                await self.db.write_statement(advance)
            return True

        def work(conn: Connection) -> bool:
            if progress is not None and progress.fence is not None:
                self._fence_sync(
                    conn, component, (progress.topic, progress.partition), progress.fence
                )
            elif fence is not None:
                self._fence_sync(conn, component, *fence)
            found: Sequence[Failure] = ()
            if apply is not None:
                assert rows is not None, "apply needs the read model's rows"
                got = apply(rows.writer(conn))
                if got is None:
                    return False
                found = got
            self._record_sync(conn, component, [*failed, *found])
            write_sync(self.db, conn, schedules)
            if progress is not None:
                self._advance_sync(conn, component, progress)
            return True

        if self.db.can_inline and await alone_soon() and self.db.try_inline_write():
            # A read model's page (its rows, dead letters, schedules and checkpoint) on a
            # SQLite file whose write lock is free, once nothing else is ready to run,
            # commits on the loop's thread: its handlers' Python ran on the writer thread
            # at 9-13% more CPU per event, and the loop only waited (BENCHMARKS.md).
            done = self.db.write_sync(work, locked=True)
        else:
            done = await self.db.write(work)
        if done and schedules and self.on_schedules is not None:
            self.on_schedules()  # wake this process's scheduler
        return done

    def _advance_sync(self, conn: Connection, component: str, progress: Progress) -> None:
        """``_advance`` in the caller's transaction."""
        cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            self._advance(component, progress, cur)
        finally:
            cur.close()

    def _advance(self, component: str, progress: Progress, cur: Any) -> None:
        """Move the checkpoint through the DBAPI cursor ``cur``, in its transaction; with
        ``progress.after``, only if the stored one is not past it (one statement: no extra
        round trip), else ``CheckpointMovedError`` rolls the batch back."""
        p = progress
        row = (component, p.topic, p.partition, p.offset)
        if p.after is None:
            cur.execute(self._checkpoint_sql, row)
            return
        if cur.execute(self._advance_sql, (*row, p.after)).rowcount == 1:
            return
        stored = cur.execute(self._stored_sql, (component, p.topic, p.partition)).fetchone()
        moved_to = int(stored[0]) if stored else 0
        raise CheckpointMovedError(component, p.topic, p.partition, moved_to)

    async def _advance_lean(self, write: LeanWrite, component: str, progress: Progress) -> None:
        """``_advance`` as statements of their own from the event loop (PostgreSQL): the
        conditional one returns the row it wrote, so a moved checkpoint costs a second
        statement only when it moved."""
        p = progress
        row = (component, p.topic, p.partition, p.offset)
        if p.after is None:
            await write(self._checkpoint_sql, row)
            return
        if await write(self._advance_returning_sql, (*row, p.after)):
            return
        stored = await write(self._stored_sql, (component, p.topic, p.partition))
        moved_to = int(stored[0]) if stored and stored[0] is not None else 0
        raise CheckpointMovedError(component, p.topic, p.partition, moved_to)

    def _fence_sync(self, conn: Connection, component: str, part: Part, fence: Fence) -> None:
        """Raise ``LeaseLostError`` (rolling the transaction back) unless ``fence.worker``
        still holds ``part`` at ``fence.epoch``. On PostgreSQL the lease row stays
        share-locked until the transaction ends, so a concurrent claim waits for this
        commit and then sees what it wrote."""
        if not holds_sync(self.db, conn, component, fence.worker, part, fence.epoch):
            raise LeaseLostError(
                f"collector {component!r} worker {fence.worker!r} no longer holds topic "
                f"{part[0]!r} partition {part[1]} (epoch {fence.epoch}): nothing of the "
                "batch landed"
            )

    def _record_sync(self, conn: Connection, component: str, failed: Sequence[Failure]) -> None:
        """Insert dead letters (a replayed batch does not duplicate them)."""
        if not failed:
            return
        now = now_us()
        conn.exec_driver_sql(
            self._dead_letter_sql,
            [
                (
                    component,
                    f.topic,
                    f.offset,
                    f.aggregate_id,
                    f.msg_id,
                    f.event_type,
                    f.error[:4000],
                    f.attempts,
                    now,
                )
                for f in failed
            ],
        )

    # -- dead letters ------------------------------------------------------------------------

    async def dead_letters(self, component: str | None = None) -> list[DeadLetter]:
        return await self.db.read(lambda conn: self.dead_letters_sync(conn, component))

    def dead_letters_sync(self, conn: Connection, component: str | None) -> list[DeadLetter]:
        """``dead_letters`` inside the caller's transaction (store-internal)."""
        q = self.db.q
        sql = (
            f"SELECT id, component, topic, {q('offset')}, aggregate_id, msg_id, event_type, "
            "error, attempts, created_at FROM rv_dead_letters"
        )
        params: tuple[Any, ...] = ()
        if component is not None:
            sql += f" WHERE component = {self.db.mark}"
            params = (component,)
        sql += f" ORDER BY component, topic, aggregate_id, {q('offset')}"
        return [DeadLetter(*r) for r in conn.exec_driver_sql(sql, params).all()]

    async def resolve(self, letter_id: int) -> None:
        sql = f"DELETE FROM rv_dead_letters WHERE id = {self.db.mark}"
        await self.db.write(lambda conn: conn.exec_driver_sql(sql, (letter_id,)))

    async def retry_failed(self, letter_id: int, error: str) -> None:
        m = self.db.mark
        sql = f"UPDATE rv_dead_letters SET attempts = attempts + 1, error = {m} WHERE id = {m}"
        await self.db.write(lambda conn: conn.exec_driver_sql(sql, (error[:4000], letter_id)))
