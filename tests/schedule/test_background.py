"""The scheduler running in the background with the wall clock: it sleeps until the
earliest schedule is due and wakes on commits (an append's, a collector batch's), never
polling in between (``poll_interval`` is a minute here), and never fires early."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import reventless as rv
from tests.schedule.model import Nudge, Order, Paid, Pay, Place, Soon

QUIET = rv.SchedulerOptions(poll_interval=60.0)

soon_after_paid = rv.SideEffectHandler("soon_after_paid")
#: The side effect returns its schedule once the test sets this (a fresh one per test).
RELEASE: dict[str, asyncio.Event] = {}


@soon_after_paid.on(Paid)
async def _soon(ev: rv.Envelope[Paid]) -> rv.Schedule:
    assert ev.aggregate_id is not None
    await RELEASE["gate"].wait()
    return rv.Schedule(Order, ev.aggregate_id, Nudge(), after=timedelta(0), id="after-paid")


def wall_app(url: str, *components: Any) -> tuple[rv.App, rv.EventLog[Order]]:
    app = rv.App(store=url, options=rv.AppOptions(scheduler=QUIET))
    orders = app.event_log(Order)
    for c in components:
        app.collect(c)
    return app, orders


async def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Wait (re-reading the store) until ``check()`` returns something true."""
    async with asyncio.timeout(timeout):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.01)


async def none_pending(app: rv.App) -> bool:
    return not await app.scheduler.pending()


async def pending_ids(app: rv.App, ids: list[str]) -> bool:
    return [s.id for s in await app.scheduler.pending()] == ids


async def nudged(orders: rv.EventLog[Order], aggregate_id: str) -> list[rv.Envelope[Any]]:
    events = await orders.read(1, 10_000)
    return [e for e in events if e.aggregate_id == aggregate_id and e.type == "Nudged"]


async def test_a_due_time_wakes_the_scheduler_and_nothing_fires_early(url: str) -> None:
    app, orders = wall_app(url)
    async with app:
        assert app.scheduler.running
        await orders.execute("o-1", Soon(ms=300))
        [pending] = await app.scheduler.pending()
        [event] = await until(lambda: nudged(orders, "o-1"))
        assert event.produced_at_us >= pending.due_at_us
        assert event.produced_at_us - pending.due_at_us < 5_000_000  # far below the poll
        await until(lambda: none_pending(app))  # the firing is recorded after it lands


async def idle(app: rv.App) -> None:
    """Until the scheduler sleeps having seen every commit (this task runs only while the
    loop's task is suspended, so it is inside that sleep)."""
    await until(lambda: asyncio.sleep(0, app.scheduler.idle))


async def test_an_append_wakes_a_scheduler_sleeping_until_a_later_schedule(url: str) -> None:
    app, orders = wall_app(url)
    async with app:
        await orders.execute("o-far", Soon(ms=3_600_000))
        await idle(app)  # asleep for the poll interval (a minute)
        await orders.execute("o-now", Soon(ms=0))
        await until(lambda: nudged(orders, "o-now"), timeout=20)
        await until(lambda: pending_ids(app, ["soon:o-far"]))  # recorded after landing


async def test_a_collector_batch_wakes_the_scheduler(url: str) -> None:
    RELEASE["gate"] = asyncio.Event()
    app, orders = wall_app(url, soon_after_paid)
    async with app:
        await orders.execute("o-far", Soon(ms=3_600_000))
        await orders.execute("o-1", Place(total=3))
        await orders.execute("o-1", Pay())  # the side effect is held back
        await idle(app)  # asleep with every commit seen, nothing due for a minute
        RELEASE["gate"].set()  # the collector's batch commits a schedule due now
        await until(lambda: nudged(orders, "o-1"), timeout=20)


async def test_stopping_the_app_stops_the_scheduler(url: str) -> None:
    app, _ = wall_app(url)
    async with app:
        assert app.scheduler.running
    assert not app.scheduler.running
    disabled = rv.App(
        store=url, options=rv.AppOptions(scheduler=rv.SchedulerOptions(enabled=False))
    )
    disabled.event_log(Order)
    async with disabled:
        assert not disabled.scheduler.running
