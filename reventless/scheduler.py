"""The scheduler: fires due scheduled commands, exactly once across processes.

Every App runs one (``AppOptions(scheduler=SchedulerOptions(...))``). A round claims the
due schedules with a lease (``ScheduleStore.claim``: processes claim disjoint rows), runs
each command on its target log with the command id ``schedule:<id>:<generation>``, and
deletes the fired rows. If a process dies between the command landing and that delete,
its lease runs out, another round claims the schedule again, and the same command id is
answered from the log (``duplicate=True``): the command lands at most once, and is fired
until it has. A failed firing is retried with exponential backoff and jitter; after
``max_attempts`` it is dead-lettered (``dead()``, ``redrive()``, ``reventless schedules``).
A command its aggregate rejects (``rv.Rejected``), and one that cannot be run at all (a
command type the target no longer handles, a command that no longer validates), is
dead-lettered at once: a retry would decide the same. An App claims only the schedules of
the logs it declares; another App on the store fires the others.

Between rounds the scheduler sleeps until the earliest pending schedule is due, or until a
commit that wrote schedules wakes it (this process's, and on PostgreSQL every process's,
through NOTIFY ``:schedules``); never longer than ``poll_interval``. Commits without
schedules do not wake it, so it costs an App nothing per command. On SQLite, schedules
another process writes are seen at the next poll (at most ``poll_interval`` late when
they are due sooner than that). With a ``ManualClock`` nothing runs in the background: a
test moves the clock and fires what is due with ``advance`` (or ``run_due``).

Example::

    app = rv.App(store="sqlite:///shop.db", options=rv.AppOptions(clock=clock))
    async with app:
        fired = await app.scheduler.advance(timedelta(minutes=30))
        assert [f.schedule.id for f in fired] == ["expire:o-1"]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from . import telemetry
from .errors import Rejected, SpecError
from .eventlog import EventLog, ExecuteResult
from .scheduling import (
    Clock,
    ManualClock,
    SystemClock,
    schedule_command_id,
    stored_meta,
    stored_trace,
    to_us,
)
from .spec import Aggregate, Command
from .store.port import Store
from .store.schedules import ScheduleFailure, StoredSchedule

log = logging.getLogger("reventless.scheduler")
#: Seconds before looking again when due schedules were all held by other claims.
_BUSY_RETRY = 0.05

__all__ = ["Firing", "Scheduler", "SchedulerOptions"]


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """How the App's scheduler runs.

    ``enabled``: fire due schedules in the background (with a ``ManualClock`` it never
    does: tests fire with ``Scheduler.advance``). ``batch``: schedules claimed per round
    (their commands run concurrently, sharing group commits). ``lease``: seconds a claim
    is held; a process that died holding one delays its schedules by up to this. A
    failed firing is retried after ``backoff * 2**attempt`` seconds (jittered, at most
    ``backoff_max``) and dead-lettered after ``max_attempts``. ``poll_interval``: the
    longest sleep without a wake-up (another process's writes to a SQLite file wake
    nobody). ``worker`` names this process's claims (default ``host-pid-random``).

    Example::

        rv.AppOptions(scheduler=rv.SchedulerOptions(lease=10.0, max_attempts=3))
    """

    enabled: bool = True
    batch: int = 500
    lease: float = 30.0
    max_attempts: int = 5
    backoff: float = 1.0
    backoff_max: float = 300.0
    poll_interval: float = 1.0
    worker: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.batch <= 10_000:
            raise SpecError(f"SchedulerOptions: batch must be 1..10000, got {self.batch!r}")
        if not 0.05 <= self.lease <= 86_400:
            raise SpecError(f"SchedulerOptions: lease must be 0.05..86400 s, got {self.lease!r}")
        if self.max_attempts < 1:
            raise SpecError("SchedulerOptions: max_attempts must be >= 1")
        if not 0 <= self.backoff <= self.backoff_max:
            raise SpecError("SchedulerOptions: need 0 <= backoff <= backoff_max")
        if not 0 < self.poll_interval <= 3600:
            raise SpecError("SchedulerOptions: poll_interval must be in (0, 3600] seconds")
        if self.worker is not None and not 0 < len(self.worker) <= 200:
            raise SpecError("SchedulerOptions: a worker id has 1..200 characters")


@dataclass(frozen=True, slots=True)
class Firing:
    """One schedule a round tried to fire: the command's result (``duplicate`` if it had
    landed before, in a round that died before recording it), or the error; ``dead``
    when this failure dead-lettered it."""

    schedule: StoredSchedule
    command: Command | None
    result: ExecuteResult | None
    error: str | None = None
    dead: bool = False

    @property
    def fired(self) -> bool:
        """True when the command has landed (now or in an earlier, interrupted round)."""
        return self.result is not None


def _worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"[:200]


class Scheduler:
    """Fires due schedules of ``store`` on the logs ``resolve`` finds by topic name; only
    those of ``topics()`` (the logs this App declares: another App on the store, with
    other logs, fires the rest).

    Built by the App (``app.scheduler``); ``start``/``stop`` run with it.
    """

    def __init__(
        self,
        store: Store,
        resolve: Callable[[str], EventLog[Any]],
        topics: Callable[[], Sequence[str]],
        *,
        clock: Clock | None = None,
        options: SchedulerOptions | None = None,
    ) -> None:
        self.store = store
        self.resolve = resolve
        #: The topics of the logs this App declares: only their schedules are claimed here.
        self.topics = topics
        self.clock: Clock = clock or SystemClock()
        self.options = opts = options or SchedulerOptions()
        self.worker = opts.worker or _worker_id()
        #: Schedules whose commands this process landed; and those it found landed
        #: already (by a round that died before recording them).
        self.fired = 0
        self.duplicates = 0
        #: Times the background loop went to sleep (nothing was due).
        self.sleeps = 0
        self._asleep_after: int | None = None  # the schedule changes its sleep waits past
        self._recording: set[asyncio.Task[None]] = set()
        self._round = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._commands: dict[tuple[type[Aggregate], str], type[Command]] = {}

    # -- running ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the background loop runs."""
        return self._task is not None and not self._task.done()

    @property
    def idle(self) -> bool:
        """True while the background loop sleeps having seen every schedule written so
        far: only a due time or new schedules wake it."""
        return self._asleep_after is not None and self._asleep_after == self.store.schedules.changes

    async def start(self) -> None:
        """Start firing in the background (unless disabled, or the clock is manual)."""
        if self.running or not self.options.enabled or isinstance(self.clock, ManualClock):
            return
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="rv-scheduler")

    async def stop(self) -> None:
        """Stop the background loop; a round in flight is cancelled (its claims expire and
        are fired again; commands that landed are answered from the log)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._flush()

    def _now(self) -> int:
        return to_us(self.clock.now())

    async def _loop(self) -> None:
        opts = self.options
        schedules = self.store.schedules
        while True:
            seen = self.store.schedules.changes  # schedules written from here on wake it
            wait = opts.poll_interval
            try:
                nxt = await schedules.next_due(self.topics())
                if nxt is not None and nxt <= self._now():
                    async with self._round:
                        tried = await self._fire_due(None)
                    if tried:
                        continue
                    # due, but another process's claim holds the rows (PostgreSQL skips
                    # locked ones): look again shortly rather than spin
                    wait = _BUSY_RETRY
                elif nxt is not None:
                    wait = min(wait, (nxt - self._now()) / 1_000_000)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler %s: round failed", self.worker)
            self.sleeps += 1
            self._asleep_after = seen
            try:
                await self._sleep(max(0.0, wait), seen)
            finally:
                self._asleep_after = None

    async def _sleep(self, seconds: float, seen: int) -> None:
        """Until ``seconds`` pass on the clock or schedules are written after ``seen``."""
        if isinstance(self.clock, SystemClock):
            await self.store.schedules.wait_for_change(seconds, seen)
            return
        timer = asyncio.ensure_future(self.clock.sleep(seconds))
        change = asyncio.ensure_future(
            self.store.schedules.wait_for_change(self.options.poll_interval, seen)
        )
        try:
            await asyncio.wait({timer, change}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (timer, change):
                t.cancel()
            await asyncio.gather(timer, change, return_exceptions=True)

    async def run_due(self) -> list[Firing]:
        """Fire every schedule due now (by the clock) that no other process holds, in
        rounds of ``batch``; returns what this call tried, in due order, once the store
        has recorded it."""
        out: list[Firing] = []
        async with self._round:
            await self._fire_due(out.extend)
            await self._flush()
        return out

    async def _fire_due(self, sink: Callable[[list[Firing]], Any] | None) -> int:
        """Rounds of claims until nothing is due; how many schedules were tried. The
        background loop keeps no list (a burst of 100,000 would stay in memory)."""
        schedules = self.store.schedules
        tried = 0
        while True:
            now = self._now()
            claimed = await schedules.claim(
                self.worker,
                now,
                lease_us=int(self.options.lease * 1_000_000),
                limit=self.options.batch,
                topics=self.topics(),
            )
            if not claimed:
                return tried
            firings = await asyncio.gather(*(self._fire(s) for s in claimed))
            self._record([(f.schedule.id, f.schedule.generation) for f in firings if f.fired])
            if any(not f.fired for f in firings):
                firings = [self._settle(f) for f in firings]
                await schedules.failed(
                    self.worker, [self._failure(f, now) for f in firings if not f.fired]
                )
            for f in firings:
                if f.result is not None:
                    if f.result.duplicate:
                        self.duplicates += 1
                    else:
                        self.fired += 1
            if sink is not None:
                sink(firings)
            tried += len(firings)
            if len(claimed) < self.options.batch:  # what fell due meanwhile: next loop
                return tried

    def _record(self, done: list[tuple[str, int]]) -> None:
        """Delete the fired rows in the background: the next claim need not wait for it
        (until it commits, the rows stay leased to this worker; if this process dies
        first, a later claim finds their commands landed)."""
        if not done:
            return
        task = asyncio.get_running_loop().create_task(self.store.schedules.fired(done))
        self._recording.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Task[None]) -> None:
        self._recording.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "scheduler %s: recording fired schedules failed: %s", self.worker, task.exception()
            )

    async def _flush(self) -> None:
        """Wait until the fired schedules of this process are recorded."""
        while self._recording:
            await asyncio.gather(*self._recording, return_exceptions=True)

    async def advance(self, by: timedelta | float) -> list[Firing]:
        """Move a ``ManualClock`` forward by ``by`` and fire what is due then (tests).

        Example::

            fired = await app.scheduler.advance(timedelta(minutes=30))
        """
        if not isinstance(self.clock, ManualClock):
            raise SpecError("Scheduler.advance needs AppOptions(clock=rv.ManualClock(...))")
        async with self._round:
            self.clock.advance(by)
        return await self.run_due()

    # -- one firing ------------------------------------------------------------------------

    def _command(self, target: EventLog[Any], s: StoredSchedule) -> Command:
        key = (target.spec, s.command_type)
        cls = self._commands.get(key)
        if cls is None:
            found = [c for c in target.spec.command_handlers if c.__name__ == s.command_type]
            if len(found) != 1:
                raise SpecError(
                    f"{target.spec.__name__} handles "
                    f"{'no' if not found else 'more than one'} command named {s.command_type!r}"
                )
            cls = self._commands[key] = found[0]
        return cls.model_validate_json(s.command)

    async def _fire(self, s: StoredSchedule) -> Firing:
        command: Command | None = None
        try:
            target = self.resolve(s.topic)
            command = self._command(target, s)
            late = (self._now() - s.due_at_us) / 1_000_000
            with telemetry.firing(s.command_type, s.topic, late, stored_trace(s.meta)):
                result = await target.execute(
                    s.aggregate_id,
                    command,
                    meta=stored_meta(s.meta),
                    command_id=schedule_command_id(s.id, s.generation),
                )
        except (Rejected, SpecError, ValidationError) as exc:  # the same on every retry
            return Firing(s, command, None, _error_text(exc), dead=True)
        except Exception as exc:
            log.warning(
                "scheduler %s: schedule %s failed: %s",
                self.worker,
                s.id,
                exc,
                extra=telemetry.fields("scheduler", topic=s.topic),
            )
            return Firing(s, command, None, _error_text(exc))
        return Firing(s, command, result)

    def _settle(self, f: Firing) -> Firing:
        """A failure that used up the attempts is dead."""
        if f.fired or f.dead or f.schedule.attempts + 1 < self.options.max_attempts:
            return f
        return Firing(f.schedule, f.command, None, f.error, dead=True)

    def _failure(self, f: Firing, now: int) -> ScheduleFailure:
        s, opts = f.schedule, self.options
        if f.dead:
            log.error(
                "scheduler %s: schedule %s dead-lettered: %s",
                self.worker,
                s.id,
                f.error,
                extra=telemetry.fields("scheduler", topic=s.topic),
            )
            return ScheduleFailure(s.id, s.generation, f.error or "", None)
        delay = min(opts.backoff_max, opts.backoff * 2**s.attempts) * random.uniform(0.5, 1.5)
        return ScheduleFailure(s.id, s.generation, f.error or "", now + int(delay * 1_000_000))

    # -- inspecting ------------------------------------------------------------------------

    async def pending(self, limit: int = 1000) -> list[StoredSchedule]:
        """Pending schedules (claimed ones included), earliest first."""
        return await self.store.schedules.find("pending", limit=limit)

    async def dead(self, limit: int = 1000) -> list[StoredSchedule]:
        """Dead-lettered schedules, with their last error and attempts."""
        return await self.store.schedules.find("dead", limit=limit)

    async def redrive(self, ids: Sequence[str] | None = None) -> int:
        """Make dead-lettered schedules (``ids``, or all) due now again; returns how many."""
        return await self.store.schedules.redrive(None if ids is None else list(ids), self._now())

    async def cancel(self, *ids: str) -> int:
        """Call off schedules by id (pending or dead); returns how many there were."""
        return await self.store.schedules.cancel(list(ids))


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, Rejected):
        return f"Rejected {exc.code}: {exc.detail}"
    return f"{type(exc).__name__}: {exc}"
