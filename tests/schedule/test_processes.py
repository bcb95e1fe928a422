"""Schedulers in several processes on one store (SQLite file, PostgreSQL): every schedule
fires exactly once, none early, also while the processes are killed with SIGKILL over and
over (issue 16's fault test). Proved by reading the store: each schedule's command
landed exactly once (one ``Nudged`` per order), at or after its due time."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
from pathlib import Path

import pytest

import reventless as rv
from tests.schedule.model import Order, Soon

ROOT = Path(__file__).resolve().parents[2]


async def plan(url: str, count: int, start_ms: int, spread_ms: int) -> dict[str, int]:
    """Schedule one ``Nudge`` per order, due between ``start_ms`` and ``start_ms +
    spread_ms`` from now; returns each order's due time (us)."""
    rng = random.Random(count)
    off = rv.AppOptions(scheduler=rv.SchedulerOptions(enabled=False))
    app = rv.App(store=url, options=off)
    orders = app.event_log(Order)
    async with app:
        await orders.execute_many(
            (f"o-{i}", Soon(ms=start_ms + rng.randrange(spread_ms))) for i in range(count)
        )
        pending = await app.scheduler.pending(limit=count + 1)
    assert len(pending) == count
    return {s.aggregate_id: s.due_at_us for s in pending}


def reader(url: str) -> tuple[rv.App, rv.EventLog[Order]]:
    """An App on the store that fires nothing (to read it)."""
    off = rv.AppOptions(scheduler=rv.SchedulerOptions(enabled=False))
    app = rv.App(store=url, options=off)
    return app, app.event_log(Order)


async def nudges(orders: rv.EventLog[Order]) -> dict[str, list[tuple[int, str | None]]]:
    """Per order: (produced at, service) of each ``Nudged`` the store holds."""
    out: dict[str, list[tuple[int, str | None]]] = {}
    for e in await orders.read(1, 1_000_000):
        if e.type == "Nudged":
            assert e.aggregate_id is not None
            out.setdefault(e.aggregate_id, []).append((e.produced_at_us, e.meta.service))
    return out


async def landed(url: str) -> dict[str, list[tuple[int, str | None]]]:
    app, orders = reader(url)
    async with app:
        return await nudges(orders)


async def spare(url: str, service: str, lease: float) -> asyncio.subprocess.Process:
    """A worker that starts up to its imports meanwhile, then waits for ``go``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.schedule.worker", url, service, str(lease),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip


async def go(proc: asyncio.subprocess.Process) -> asyncio.subprocess.Process:
    """Start a ``spare`` worker's scheduler (once it is ready); once its App runs."""
    assert proc.stdin is not None and proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line == b"ready\n", line
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line == b"started\n", line
    return proc


async def worker(url: str, service: str, lease: float) -> asyncio.subprocess.Process:
    """A worker whose scheduler runs (its App started)."""
    return await go(await spare(url, service, lease))


async def finish(proc: asyncio.subprocess.Process) -> tuple[int, int]:
    """Wait for a worker to find nothing pending; its (fired, duplicates)."""
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
    assert await proc.wait() == 0
    _, fired, duplicates = line.split()
    return int(fired), int(duplicates)


def check_once_and_on_time(
    due: dict[str, int], got: dict[str, list[tuple[int, str | None]]]
) -> list[float]:
    """Every order nudged exactly once, never before its due time; the lateness (ms)."""
    assert sorted(got) == sorted(due), "some schedules never fired"
    twice = {k: v for k, v in got.items() if len(v) != 1}
    assert not twice, f"fired more than once: {twice}"
    early = {k: got[k][0][0] - due[k] for k in due if got[k][0][0] < due[k]}
    assert not early, f"fired early (us): {early}"
    return sorted((got[k][0][0] - due[k]) / 1000 for k in due)


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))]


async def test_two_processes_never_fire_a_schedule_twice(shared_url: str) -> None:
    due = await plan(shared_url, 300, start_ms=1500, spread_ms=2000)
    procs = await asyncio.gather(*(worker(shared_url, f"w{k}", 5.0) for k in range(2)))
    results = await asyncio.gather(*(finish(p) for p in procs))
    got = await landed(shared_url)
    check_once_and_on_time(due, got)
    assert sum(fired for fired, _ in results) == 300  # each landed by exactly one process
    assert sum(dup for _, dup in results) == 0  # and nobody fired one a second time
    by_service = {svc for v in got.values() for _, svc in v}
    assert by_service <= {"w0", "w1"}


@pytest.mark.slow
async def test_killing_schedulers_repeatedly_fires_each_schedule_exactly_once(
    shared_url: str,
) -> None:
    count = 1000
    due = await plan(shared_url, count, start_ms=2000, spread_ms=12_000)
    lease = 1.0
    kills = 0
    rng = random.Random(7)
    app, orders = reader(shared_url)
    # The next worker starts up (its imports) while the current one runs, so a slow
    # machine's interpreter start-up does not eat the window the schedules are due in.
    following = await spare(shared_url, "k0", lease)
    try:
        async with app:

            async def landed_count() -> int:
                return sum(len(v) for v in (await nudges(orders)).values())

            seen = 0
            while seen < count:
                proc = await go(following)
                following = await spare(shared_url, f"k{kills + 1}", lease)
                # once it is firing, let it run a random while, then kill it mid-work
                async with asyncio.timeout(60):
                    while await landed_count() <= seen and proc.returncode is None:
                        await asyncio.sleep(0.02)
                await asyncio.sleep(rng.uniform(0.2, 1.0))
                if proc.returncode is not None:  # it found nothing left to do
                    break
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                kills += 1
                seen = await landed_count()
        # one clean run finishes what is left (claims of the killed ones expire first)
        await finish(await go(following))
    finally:
        if following.returncode is None:  # a failure above: no worker left behind
            following.kill()
            await following.wait()
    late = check_once_and_on_time(due, await landed(shared_url))
    assert kills >= 3, f"only {kills} kills: the test did not interrupt the scheduler"
    print(
        f"\n{count} schedules, {kills} SIGKILLs: lateness p50 {percentile(late, 0.5):.0f} ms, "
        f"p99 {percentile(late, 0.99):.0f} ms, max {late[-1]:.0f} ms "
        f"(mean {statistics.fmean(late):.0f} ms)"
    )
