"""Declaring schedules is pure and checked up front; a ManualClock moves only when told;
the GWT helpers see what a handler scheduled."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

import reventless as rv
from reventless.scheduling import (
    ScheduledCommand,
    schedule_command_id,
    schedule_writes,
    stored_meta,
    to_us,
)
from reventless.testing import given, given_event
from tests.model import Increment
from tests.schedule.model import (
    EXPIRY,
    START,
    Expire,
    Nudge,
    Order,
    Paid,
    Pay,
    Place,
    Placed,
    Postpone,
    Postponed,
    expiry,
    reminders,
)


def test_a_schedule_needs_one_due_time_an_aggregate_target_and_a_handled_command() -> None:
    with pytest.raises(rv.SpecError, match="one of at="):
        rv.Schedule(Order, "o-1", Expire())
    with pytest.raises(rv.SpecError, match="one of at="):
        rv.Schedule(Order, "o-1", Expire(), at=START, after=EXPIRY)
    with pytest.raises(rv.SpecError, match="timezone-aware"):
        rv.Schedule(Order, "o-1", Expire(), at=datetime(2030, 1, 1))
    with pytest.raises(rv.SpecError, match=">= 0"):
        rv.Schedule(Order, "o-1", Expire(), after=timedelta(seconds=-1))
    with pytest.raises(rv.SpecError, match="Aggregate subclass"):
        rv.Schedule(rv.Aggregate, "o-1", Expire(), after=EXPIRY)
    with pytest.raises(rv.SpecError, match="no @handles for Increment"):
        rv.Schedule(Order, "o-1", Increment(), after=EXPIRY)
    with pytest.raises(rv.SpecError, match=r"rv\.Command"):
        rv.Schedule(Order, "o-1", Placed(total=1), after=EXPIRY)  # type: ignore[arg-type]
    with pytest.raises(rv.SpecError, match="non-empty"):
        rv.Schedule(Order, "", Expire(), after=EXPIRY)
    with pytest.raises(rv.SpecError, match="printable"):
        rv.Schedule(Order, "o-1", Expire(), after=EXPIRY, id="x" * 151)
    with pytest.raises(rv.SpecError, match="printable"):
        rv.CancelSchedule("a\nb")
    assert rv.Schedule("Order", "o-1", Expire(), after=EXPIRY).target == "Order"


def test_due_times_are_exact_microseconds() -> None:
    now = to_us(START)
    assert rv.Schedule(Order, "o", Expire(), after=EXPIRY).due_us(now) == now + 1_800_000_000
    at = START + timedelta(microseconds=7)
    assert rv.Schedule(Order, "o", Expire(), at=at).due_us(0) == now + 7


def test_writes_keep_order_and_derive_missing_ids() -> None:
    ops = [
        rv.Schedule(Order, "o-1", Expire(), after=EXPIRY),
        rv.CancelSchedule("expire:o-2"),
        expiry("o-3"),
    ]
    writes = schedule_writes(
        ops,
        now_us=to_us(START),
        topic_of=lambda t: "orders" if t is Order else str(t),
        default_id=lambda i: f"derived-{i}",
        meta=rv.Metadata(correlation_id="corr", user="ada"),
    )
    assert [w.id for w in writes] == ["derived-0", "expire:o-2", "expire:o-3"]
    first = writes[0]
    assert isinstance(first, ScheduledCommand)
    assert (first.topic, first.command_type, first.command) == ("orders", "Expire", "{}")
    assert first.due_at_us == to_us(START + EXPIRY)
    assert stored_meta(first.meta) == rv.Metadata(correlation_id="corr", user="ada")
    assert schedule_command_id("expire:o-1", 5) == "schedule:expire:o-1:5"


async def test_a_manual_clock_moves_only_when_told_and_wakes_its_sleepers() -> None:
    clock = rv.ManualClock(START)
    sleeper = asyncio.ensure_future(clock.sleep(60))
    await asyncio.sleep(0)
    assert clock.now() == START and not sleeper.done()
    clock.advance(timedelta(seconds=59))
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(1.0)
    await asyncio.wait_for(sleeper, 1)
    with pytest.raises(rv.SpecError, match="back"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(rv.SpecError, match="back"):
        clock.set(START)
    await clock.sleep(0)  # due at once


def test_gwt_sees_what_a_command_scheduled_and_cancelled() -> None:
    given(Order, aggregate_id="o-1").when(Place(total=5)).then_scheduled(expiry("o-1"))
    outcome = given(Order, Placed(total=5), aggregate_id="o-1").when(Pay())
    outcome.then(Paid())
    outcome.then_scheduled(rv.CancelSchedule("expire:o-1"))
    given(Order, Placed(total=5), aggregate_id="o-1").when(Postpone(minutes=5)).then(
        Postponed(minutes=5)
    )
    with pytest.raises(AssertionError, match="scheduled"):
        given(Order, aggregate_id="o-1").when(Place(total=5)).then_scheduled()
    with pytest.raises(AssertionError, match="rejected"):
        given(Order, Placed(total=5)).when(Place(total=5)).then_scheduled(expiry("test-1"))


def test_decide_returns_the_events_and_decide_all_the_directives_apart() -> None:
    order = Order(id="o-1")
    assert order.decide(Place(total=5)) == [Placed(total=5)]
    assert order.decide_all(Place(total=5)) == ([Placed(total=5)], [expiry("o-1")])


def test_gwt_sees_what_a_mapper_scheduled() -> None:
    scenario = given_event(reminders, "o-9", Placed(total=1))
    scenario.then_commands()
    scenario.then_scheduled(rv.Schedule(Order, "o-9", Nudge(), after=timedelta(hours=1)))


def test_scheduler_options_are_checked() -> None:
    with pytest.raises(rv.SpecError, match="batch"):
        rv.SchedulerOptions(batch=0)
    with pytest.raises(rv.SpecError, match="lease"):
        rv.SchedulerOptions(lease=0)
    with pytest.raises(rv.SpecError, match="max_attempts"):
        rv.SchedulerOptions(max_attempts=0)
    with pytest.raises(rv.SpecError, match="backoff"):
        rv.SchedulerOptions(backoff=10, backoff_max=1)
    assert rv.AppOptions().scheduler.enabled
    assert isinstance(rv.AppOptions().clock, rv.SystemClock)
    assert rv.SystemClock().now().tzinfo is UTC
