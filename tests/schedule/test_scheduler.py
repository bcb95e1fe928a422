"""Scheduled commands end to end on SQLite and PostgreSQL, with a ManualClock: stored in
the transaction that made them, fired once when due (never before), rescheduled,
cancelled, retried, dead-lettered and redriven. Every claim is proved by reading the
store: the target log's events, ``rv_schedules`` and ``rv_commands``."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import reventless as rv
from reventless.eventlog import command_id_for
from reventless.scheduling import schedule_command_id, to_us
from tests.schedule.model import (
    DECIDED,
    EXPIRY,
    FLAKY_FAILURES,
    START,
    Arm,
    Expire,
    Expired,
    Order,
    Pay,
    Ping,
    Place,
    Postpone,
    Remind,
    follow_ups,
    reminders,
)


def order_app(
    url: str,
    clock: rv.ManualClock | None = None,
    *,
    scheduler: rv.SchedulerOptions | None = None,
    collect: tuple[Any, ...] = (),
) -> tuple[rv.App, rv.EventLog[Order]]:
    options = rv.AppOptions(
        clock=clock or rv.ManualClock(START),
        scheduler=scheduler or rv.SchedulerOptions(),
    )
    app = rv.App(store=url, options=options)
    orders = app.event_log(Order)
    for component in collect:
        app.collect(component)
    return app, orders


async def events_of(orders: rv.EventLog[Order], aggregate_id: str) -> list[rv.Envelope[Any]]:
    return [e for e in await orders.read(1, 100_000) if e.aggregate_id == aggregate_id]


async def types_of(orders: rv.EventLog[Order], aggregate_id: str) -> list[str]:
    return [e.type for e in await events_of(orders, aggregate_id)]


async def test_a_scheduled_command_fires_once_when_due_and_never_before(url: str) -> None:
    clock = rv.ManualClock(START)
    app, orders = order_app(url, clock)
    async with app:
        await orders.execute("o-1", Place(total=5))
        [pending] = await app.scheduler.pending()
        assert (pending.id, pending.topic, pending.aggregate_id) == ("expire:o-1", "Order", "o-1")
        assert pending.due_at_us == to_us(START + EXPIRY) and pending.command_type == "Expire"
        assert await app.scheduler.advance(EXPIRY - timedelta(microseconds=1)) == []
        assert await types_of(orders, "o-1") == ["Placed"]
        [firing] = await app.scheduler.advance(timedelta(microseconds=1))
        assert firing.fired and firing.result is not None and not firing.result.duplicate
        assert firing.command == Expire()
        placed, expired = await events_of(orders, "o-1")
        assert expired.type == "Expired"
        # the fired command carries the command's correlation and its event as cause
        assert expired.meta.correlation_id == placed.meta.correlation_id
        assert expired.meta.causation_id == placed.msg_id
        command_id = schedule_command_id("expire:o-1", pending.generation)
        record = await app.store.find_command(command_id)
        assert record is not None and (record.first_offset, record.last_offset) == (2, 2)
        assert await app.store.schedules.find() == []
        assert await app.scheduler.advance(timedelta(days=365)) == []
        assert await types_of(orders, "o-1") == ["Placed", "Expired"]
        assert DECIDED["expire"] == 1


async def test_the_same_id_reschedules_and_a_cancel_calls_it_off(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Place(total=5))
        [first] = await app.scheduler.pending()
        await orders.execute("o-1", Postpone(minutes=60))
        [moved] = await app.scheduler.pending()
        assert moved.id == first.id and moved.due_at_us == to_us(START + timedelta(minutes=60))
        assert moved.generation > first.generation  # a new command id for the new firing
        await orders.execute("o-2", Place(total=5))
        await orders.execute("o-2", Pay())  # cancels expire:o-2 in the same append
        assert [s.id for s in await app.scheduler.pending()] == ["expire:o-1"]
        assert await app.scheduler.advance(EXPIRY) == []
        [fired] = await app.scheduler.advance(EXPIRY)
        assert fired.schedule.generation == moved.generation
        assert await app.scheduler.advance(timedelta(days=1)) == []
        assert await types_of(orders, "o-1") == ["Placed", "Postponed", "Expired"]
        assert await types_of(orders, "o-2") == ["Placed", "Paid"]


async def test_rejected_and_duplicate_commands_write_no_schedules(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Place(total=5), command_id="place-1")
        [before] = await app.store.schedules.find()
        with pytest.raises(rv.Rejected):
            await orders.execute("o-1", Place(total=6))
        again = await orders.execute("o-1", Place(total=5), command_id="place-1")
        assert again.duplicate
        # neither wrote: a write would have replaced the row with a new generation
        assert await app.store.schedules.find() == [before]


async def test_a_lost_concurrency_race_leaves_none_of_its_schedules(shared_url: str) -> None:
    """Two Apps ping the same orders at once: clashing appends retry, and every schedule
    in the store belongs to an event that landed (ids derive from the last event)."""
    apps = [order_app(shared_url) for _ in range(2)]
    for app, _ in apps:
        await app.start()
    try:
        await asyncio.gather(
            *(orders.execute(f"o-{i % 3}", Ping()) for i in range(40) for _, orders in apps)
        )
        app, orders = apps[0]
        pings = [e for e in await orders.read(1, 1000) if e.type == "Nudged"]
        pending = await app.store.schedules.find(limit=10_000)
        assert len(pings) == 80
        derived = {command_id_for("Order", e.msg_id, "schedule", "0") for e in pings}
        assert {s.id for s in pending} == derived
    finally:
        for app, _ in apps:
            await app.stop()


async def test_schedules_of_a_group_commit_are_all_stored(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        results = await orders.execute_many((f"o-{i}", Place(total=i)) for i in range(300))
        assert all(isinstance(r, rv.ExecuteResult) for r in results)
        pending = await app.store.schedules.find(limit=1000)
        assert sorted(s.id for s in pending) == sorted(f"expire:o-{i}" for i in range(300))
        fired = await app.scheduler.advance(EXPIRY)
        assert len(fired) == 300 and all(f.fired for f in fired)
        events = await orders.read(1, 10_000)
        assert sum(e.type == "Expired" for e in events) == 300
        assert await app.store.schedules.find() == []


async def test_a_decision_of_schedules_only_stores_them(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Remind())
        assert await orders.read(1, 10) == []
        assert [s.id for s in await app.scheduler.pending()] == ["expire:o-1"]


async def test_a_failing_firing_backs_off_then_is_dead_lettered_and_redriven(url: str) -> None:
    FLAKY_FAILURES["left"] = 100
    options = rv.SchedulerOptions(max_attempts=3, backoff=10.0, backoff_max=60.0)
    app, orders = order_app(url, scheduler=options)
    async with app:
        await orders.execute("o-1", Arm())
        [first] = await app.scheduler.advance(timedelta(minutes=1))
        assert not first.fired and not first.dead and "flaky command failed" in (first.error or "")
        [row] = await app.scheduler.pending()
        now = to_us(START + timedelta(minutes=1))
        # backoff 10 s, jittered by 0.5..1.5
        assert (row.attempts, row.owner) == (1, None)
        assert now + 5_000_000 <= row.next_at_us <= now + 15_000_000
        assert await app.scheduler.run_due() == []  # not before its backoff
        [second] = await app.scheduler.advance(timedelta(seconds=15))
        assert not second.dead
        [third] = await app.scheduler.advance(timedelta(seconds=30))
        assert third.dead
        assert await app.scheduler.pending() == []
        [dead] = await app.scheduler.dead()
        assert (dead.id, dead.attempts, dead.status) == ("flaky:o-1", 3, "dead")
        assert dead.error == "RuntimeError: the flaky command failed"
        assert await app.scheduler.advance(timedelta(days=1)) == []  # dead stays dead
        FLAKY_FAILURES["left"] = 0
        assert await app.scheduler.redrive() == 1
        [done] = await app.scheduler.run_due()
        assert done.fired
        assert await app.store.schedules.find() == []
        assert await types_of(orders, "o-1") == ["Nudged", "Nudged"]
        assert DECIDED["flaky"] == 4


async def test_a_rejected_firing_is_dead_lettered_at_once(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Place(total=5))
        await orders.execute("o-1", Expire())  # expired by hand: the schedule will be refused
        [firing] = await app.scheduler.advance(EXPIRY)
        assert firing.dead and firing.error is not None
        assert firing.error.startswith("Rejected not_open")
        [dead] = await app.scheduler.dead()
        assert (dead.id, dead.attempts) == ("expire:o-1", 1)
        assert await app.scheduler.redrive(["nope"]) == 0
        assert await app.scheduler.redrive(["expire:o-1"]) == 1
        [again] = await app.scheduler.run_due()
        assert again.dead  # refused again: a business rule does not change on retry
        assert await app.scheduler.cancel("expire:o-1") == 1
        assert await app.store.schedules.find() == []
        assert await types_of(orders, "o-1") == ["Placed", "Expired"]


async def test_a_firing_that_landed_before_its_process_died_lands_once(url: str) -> None:
    """A worker claimed the schedule, landed its command and died before recording it:
    once its lease runs out the schedule is claimed again and the command id is answered
    from the log; the handler does not run twice."""
    lease = rv.SchedulerOptions().lease
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Place(total=5))
        app.options.clock.advance(EXPIRY)  # type: ignore[attr-defined]
        now = to_us(START + EXPIRY)
        [claimed] = await app.store.schedules.claim(
            "died", now, lease_us=int(lease * 1_000_000), limit=10, topics=["Order"]
        )
        command_id = schedule_command_id(claimed.id, claimed.generation)
        await orders.execute("o-1", Expire(), command_id=command_id)  # what "died" did
        assert await app.scheduler.run_due() == []  # its lease still holds
        [firing] = await app.scheduler.advance(timedelta(seconds=lease))
        assert firing.result is not None and firing.result.duplicate
        assert (app.scheduler.fired, app.scheduler.duplicates) == (0, 1)
        assert await types_of(orders, "o-1") == ["Placed", "Expired"]
        assert DECIDED["expire"] == 1
        assert await app.store.schedules.find() == []


async def test_two_schedulers_on_one_store_never_fire_one_schedule_twice(
    shared_url: str,
) -> None:
    clock = rv.ManualClock(START)
    (a, a_orders), (b, _) = order_app(shared_url, clock), order_app(shared_url, clock)
    async with a, b:
        await a_orders.execute_many((f"o-{i}", Place(total=i)) for i in range(200))
        clock.advance(EXPIRY)
        fired_a, fired_b = await asyncio.gather(a.scheduler.run_due(), b.scheduler.run_due())
        ids_a = {f.schedule.id for f in fired_a}
        ids_b = {f.schedule.id for f in fired_b}
        assert not ids_a & ids_b and len(ids_a | ids_b) == 200
        assert all(f.fired and f.result and not f.result.duplicate for f in fired_a + fired_b)
        events = await a_orders.read(1, 10_000)
        assert sum(e.type == "Expired" for e in events) == 200
        assert DECIDED["expire"] == 200


async def test_mapper_and_side_effect_schedules_commit_with_their_batch(url: str) -> None:
    app, orders = order_app(url, collect=(reminders, follow_ups))
    async with app:
        await orders.execute("o-1", Place(total=5))
        await app.settle()
        placed = (await events_of(orders, "o-1"))[0]
        nudge_id = command_id_for("order_reminders", placed.msg_id, "schedule", "0")
        assert sorted(s.id for s in await app.scheduler.pending()) == sorted(
            ["expire:o-1", nudge_id]
        )
        await orders.execute("o-1", Pay())
        await app.settle()
        assert sorted(s.id for s in await app.scheduler.pending()) == sorted(
            ["follow:o-1", nudge_id]
        )
        [nudge] = await app.scheduler.advance(timedelta(hours=1))
        assert nudge.schedule.id == nudge_id and nudge.fired
        [follow] = await app.scheduler.advance(timedelta(days=1))
        assert follow.schedule.id == "follow:o-1" and follow.fired
        events = await events_of(orders, "o-1")
        assert [e.type for e in events] == ["Placed", "Paid", "Nudged", "Nudged"]
        paid, first_nudge = events[1], events[2]
        # a mapper's schedule inherits the event's correlation, with the event as cause
        assert first_nudge.meta.correlation_id == placed.meta.correlation_id
        assert first_nudge.meta.causation_id == placed.msg_id
        assert events[3].meta.causation_id == paid.msg_id
        await app.settle()


async def test_a_redelivered_mapper_batch_writes_the_same_schedules(shared_url: str) -> None:
    app, orders = order_app(shared_url, collect=(reminders,))
    async with app:
        await orders.execute("o-1", Place(total=5))
        await app.settle()
        before = sorted(s.id for s in await app.scheduler.pending())
    # the checkpoint is lost: the next run delivers Placed again
    await _drop_checkpoints(shared_url, "order_reminders")
    again, _ = order_app(shared_url, collect=(reminders,))
    async with again:
        await again.settle()
        assert sorted(s.id for s in await again.scheduler.pending()) == before
        assert len(before) == 2


async def _drop_checkpoints(url: str, component: str) -> None:
    from reventless.store import require_sql

    app, _ = order_app(url)
    async with app:
        db = require_sql(app.store, "the test").db
        sql = f"DELETE FROM rv_checkpoints WHERE component = {db.mark}"
        await db.write(lambda conn: conn.exec_driver_sql(sql, (component,)))


async def test_stored_schedules_survive_a_restart(shared_url: str) -> None:
    clock = rv.ManualClock(START)
    app, orders = order_app(shared_url, clock)
    async with app:
        await orders.execute("o-1", Place(total=5))
    later, later_orders = order_app(shared_url, clock)
    async with later:
        [fired] = await later.scheduler.advance(EXPIRY)
        assert fired.fired
        assert await types_of(later_orders, "o-1") == ["Placed", "Expired"]


async def test_a_command_that_cannot_run_is_dead_lettered(url: str) -> None:
    from reventless.scheduling import ScheduledCommand

    app, orders = order_app(url)
    async with app:
        due = to_us(START)
        await app.store.schedules.write(
            [
                ScheduledCommand("renamed", "Order", "o-1", "Vanished", "{}", due, "{}"),
                ScheduledCommand("garbled", "Order", "o-1", "Place", '{"total": "x"}', due, "{}"),
            ]
        )
        firings = await app.scheduler.run_due()
        assert sorted((f.schedule.id, f.dead) for f in firings) == [
            ("garbled", True),
            ("renamed", True),
        ]
        assert {d.id: d.error for d in await app.scheduler.dead()} == {
            "renamed": "SpecError: Order handles no command named 'Vanished'",
            "garbled": next(f.error for f in firings if f.schedule.id == "garbled"),
        }
        assert await orders.read(1, 10) == []


async def test_an_app_fires_only_the_schedules_of_its_own_logs(shared_url: str) -> None:
    """A schedule for a log this App does not declare waits for an App that does."""
    from reventless.scheduling import ScheduledCommand

    clock = rv.ManualClock(START)
    other = rv.App(store=shared_url, options=rv.AppOptions(clock=clock))
    app, orders = order_app(shared_url, clock)
    async with app, other:
        due = to_us(START)
        await app.store.schedules.write(
            [ScheduledCommand("elsewhere", "Invoices", "i-1", "Send", "{}", due, "{}")]
        )
        await orders.execute("o-1", Place(total=1))
        assert await other.scheduler.advance(EXPIRY) == []  # declares no logs: fires nothing
        [fired] = await app.scheduler.run_due()
        assert fired.schedule.id == "expire:o-1"
        assert [s.id for s in await app.scheduler.pending()] == ["elsewhere"]


async def test_events_and_results_stay_typed_after_firing(url: str) -> None:
    app, orders = order_app(url)
    async with app:
        await orders.execute("o-1", Place(total=5))
        [firing] = await app.scheduler.advance(EXPIRY)
        assert firing.result is not None and firing.result.events == (Expired(),)
        state = await orders.load("o-1")
        assert state.status == "expired" and state.version == 2
