"""Scheduled commands as handlers declare them, and the clock they come due by.

A command handler, an event mapper or a side-effect handler returns
``rv.Schedule(target, aggregate_id, command, at=... | after=..., id=...)`` (beside its
events, commands or nothing) to have ``command`` executed on that aggregate later, and
``rv.CancelSchedule(id)`` to call a pending one off. Scheduling an ``id`` again replaces
the pending schedule (a reschedule). What a handler returns is stored in the transaction
of what produced it: the append of the command's events, or the collector's checkpoint
batch. The App's scheduler (``reventless.scheduler``) fires it once it is due.

Time comes from a ``Clock``: ``SystemClock`` (the wall clock) unless the App is given
another one, e.g. a ``ManualClock`` that tests move forward by hand.

Example::

    @rv.handles(PlaceOrder)
    def place(self, cmd: PlaceOrder) -> list[rv.Event | rv.Schedule]:
        return [
            OrderPlaced(total=cmd.total),
            rv.Schedule(Order, self.id, ExpireOrder(), after=timedelta(minutes=30),
                        id=f"expire:{self.id}"),
        ]
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from .errors import SpecError
from .spec import Aggregate, Command, Directive, Metadata

__all__ = [
    "CancelSchedule",
    "Clock",
    "ManualClock",
    "Schedule",
    "ScheduleWrite",
    "ScheduledCommand",
    "SystemClock",
    "from_us",
    "schedule_command_id",
    "schedule_writes",
    "stored_trace",
    "to_us",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Longest schedule id: ``schedule:<id>:<generation>`` must fit a command id (200).
MAX_ID = 150


def to_us(when: datetime) -> int:
    """``when`` (timezone-aware) in microseconds since the epoch, exactly."""
    return (when - _EPOCH) // _US


def from_us(us: int) -> datetime:
    """The UTC datetime of ``us`` microseconds since the epoch."""
    return _EPOCH + timedelta(microseconds=us)


def _check_id(owner: str, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID or not value.isprintable():
        raise SpecError(f"{owner}: an id is 1..{MAX_ID} printable characters, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Schedule(Directive):
    """Execute ``command`` on aggregate ``aggregate_id`` of ``target`` later: ``at`` a
    time (timezone-aware) or ``after`` a delay from now (by the App's clock).

    ``target`` is an aggregate spec class (or the topic name of its log). ``id`` names the
    schedule so it can be cancelled or rescheduled (scheduling an id again replaces the
    pending schedule); without one, the producer derives an id (a mapper: from the event
    and the schedule's position, so a redelivery writes the same schedule again).

    Example::

        rv.Schedule(Order, "o-1", ExpireOrder(), after=timedelta(minutes=30), id="expire:o-1")
    """

    target: type[Aggregate] | str
    aggregate_id: str
    command: Command
    at: datetime | None = None
    after: timedelta | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.command, Command):
            raise SpecError(f"Schedule: command must be an rv.Command, got {self.command!r}")
        target = self.target
        if isinstance(target, str):
            if not target:
                raise SpecError("Schedule: the target topic name is empty")
        elif not (isinstance(target, type) and issubclass(target, Aggregate)) or (
            target is Aggregate
        ):
            raise SpecError(f"Schedule: target must be an Aggregate subclass, got {target!r}")
        elif type(self.command) not in target.command_handlers:
            raise SpecError(
                f"Schedule: {target.__name__} has no @handles for {type(self.command).__name__}"
            )
        if not isinstance(self.aggregate_id, str) or not self.aggregate_id:
            raise SpecError(f"Schedule: aggregate_id {self.aggregate_id!r} is not a non-empty str")
        if (self.at is None) == (self.after is None):
            raise SpecError("Schedule: give one of at= (a datetime) or after= (a timedelta)")
        if self.at is not None and (
            not isinstance(self.at, datetime) or self.at.utcoffset() is None
        ):
            raise SpecError(f"Schedule: at= must be a timezone-aware datetime, got {self.at!r}")
        if self.after is not None and (
            not isinstance(self.after, timedelta) or self.after < timedelta(0)
        ):
            raise SpecError(f"Schedule: after= must be a timedelta >= 0, got {self.after!r}")
        if self.id is not None:
            _check_id("Schedule", self.id)

    def due_us(self, now_us: int) -> int:
        """When it is due, in microseconds since the epoch (``now_us``: the clock's now)."""
        if self.at is not None:
            return to_us(self.at)
        assert self.after is not None
        return now_us + self.after // _US


@dataclass(frozen=True, slots=True)
class CancelSchedule(Directive):
    """Call off the pending (or dead-lettered) schedule ``id``; nothing if there is none.

    Example::

        rv.CancelSchedule("expire:o-1")
    """

    id: str

    def __post_init__(self) -> None:
        _check_id("CancelSchedule", self.id)


@dataclass(frozen=True, slots=True)
class ScheduledCommand:
    """A schedule as the store keeps it: the target log's topic, the command's type name
    and JSON, the due time (microseconds since the epoch) and the metadata the fired
    command carries (JSON: correlation and causation ids, user, tenant)."""

    id: str
    topic: str
    aggregate_id: str
    command_type: str
    command: str
    due_at_us: int
    meta: str


#: One write of a producer: store (or replace) a schedule, or cancel one.
ScheduleWrite = ScheduledCommand | CancelSchedule


def meta_json(meta: Metadata, trace: str | None = None) -> str:
    """The metadata a fired command inherits, as stored with its schedule (and the trace
    context of the decision that scheduled it: the firing continues that trace)."""
    keep = {
        "correlation_id": meta.correlation_id,
        "causation_id": meta.causation_id,
        "user": meta.user,
        "tenant": meta.tenant,
        "traceparent": trace,
    }
    return json.dumps({k: v for k, v in keep.items() if v is not None}, sort_keys=True)


def stored_meta(text: str | None) -> Metadata:
    """The ``Metadata`` of a fired command from its schedule's stored JSON."""
    data = json.loads(text) if text else {}
    return Metadata(
        correlation_id=data.get("correlation_id"),
        causation_id=data.get("causation_id"),
        user=data.get("user"),
        tenant=data.get("tenant"),
    )


def stored_trace(text: str | None) -> str | None:
    """The trace context stored with a schedule (None: none)."""
    value = json.loads(text).get("traceparent") if text else None
    return value if isinstance(value, str) else None


def schedule_writes(
    directives: Iterable[Directive],
    *,
    now_us: int,
    topic_of: Callable[[type[Aggregate] | str], str],
    default_id: Callable[[int], str],
    meta: Metadata,
    trace: str | None = None,
) -> list[ScheduleWrite]:
    """What a producer stores for the ``directives`` its handler returned, in order.

    ``topic_of`` names the target's log (an unknown target raises); ``default_id(i)`` is
    the id of the ``i``-th schedule that has none; ``meta`` is what the fired commands
    carry (correlation, causation, user, tenant).
    """
    out: list[ScheduleWrite] = []
    stored = meta_json(meta, trace)
    for i, d in enumerate(directives):
        if isinstance(d, CancelSchedule):
            out.append(d)
        elif isinstance(d, Schedule):
            out.append(
                ScheduledCommand(
                    id=d.id if d.id is not None else _check_id("Schedule", default_id(i)),
                    topic=topic_of(d.target),
                    aggregate_id=d.aggregate_id,
                    command_type=type(d.command).__name__,
                    command=d.command.model_dump_json(),
                    due_at_us=d.due_us(now_us),
                    meta=stored,
                )
            )
        else:
            raise SpecError(f"unknown directive {d!r} (expected rv.Schedule or rv.CancelSchedule)")
    return out


def schedule_command_id(schedule_id: str, generation: int) -> str:
    """The command id a firing of schedule ``schedule_id`` at ``generation`` carries: the
    same on every retry (so it lands at most once), another for a rescheduled one.

    Example::

        >>> schedule_command_id("expire:o-1", 1718000000000000)
        'schedule:expire:o-1:1718000000000000'
    """
    return f"schedule:{schedule_id}:{generation}"


class Clock(Protocol):
    """Where the scheduler (and producers computing ``after=``) get the time from."""

    def now(self) -> datetime:
        """The current time (timezone-aware)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock."""
        ...


class SystemClock:
    """The wall clock (``datetime.now(UTC)``, ``asyncio.sleep``): the default.

    Example::

        rv.AppOptions(clock=rv.SystemClock())
    """

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep``."""
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told (``advance``, ``set``): for tests.

    ``sleep`` returns once the clock has been moved past its deadline. Call it from the
    event loop's thread.

    Example::

        clock = rv.ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        clock.advance(timedelta(minutes=30))
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.utcoffset() is None:
            raise SpecError(f"ManualClock: start must be timezone-aware, got {start!r}")
        self._now = start or datetime.now(UTC)
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        """The clock's current time."""
        return self._now

    def advance(self, by: timedelta | float) -> datetime:
        """Move forward by ``by`` (a timedelta, or seconds); returns the new time."""
        step = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if step < timedelta(0):
            raise SpecError(f"ManualClock: cannot go back in time ({step})")
        return self.set(self._now + step)

    def set(self, to: datetime) -> datetime:
        """Move forward to ``to`` (never back); wakes the sleepers that are due."""
        if to.utcoffset() is None:
            raise SpecError(f"ManualClock: {to!r} is not timezone-aware")
        if to < self._now:
            raise SpecError(f"ManualClock: cannot go back from {self._now} to {to}")
        self._now = to
        keep = []
        for deadline, fut in self._sleepers:
            if deadline <= to:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((deadline, fut))
        self._sleepers = keep
        return to

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock is moved ``seconds`` past now."""
        deadline = self._now + timedelta(seconds=max(0.0, seconds))
        if deadline <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((deadline, fut))
        await fut
