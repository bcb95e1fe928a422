"""PostgreSQL under concurrency and faults."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

import reventless as rv
from tests.integration.pg_writers import seen, start_replica, write
from tests.model import Counter, Increment, Incremented

pytestmark = pytest.mark.postgres


@pytest.mark.slow
async def test_concurrent_processes_gapless_and_a_live_collector_skips_nothing(
    pg_url: str,
) -> None:
    procs, per = 4, 150
    app = rv.App(
        store=pg_url,
        options=rv.AppOptions(collector=rv.CollectorOptions(page_size=50, poll_interval=60.0)),
    )
    log = app.event_log(Counter)
    view = app.collect(seen)
    async with app:  # the collector runs while the other processes write
        loop = asyncio.get_running_loop()
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(procs, mp_context=ctx) as pool:
            landed = await asyncio.gather(
                *(loop.run_in_executor(pool, write, pg_url, w, per) for w in range(procs))
            )
        total = procs * (per + per // 10)
        assert landed == [per + per // 10] * procs
        # poll_interval is a minute: catching up before it needs the LISTEN/NOTIFY wake-ups
        await asyncio.wait_for(view.wait_caught_up(), 30.0)
        rows = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                f"SELECT _offset, _aggregate_id, _version FROM {app.store.table_of('Counter')} "
                "ORDER BY _offset"
            ).all()
        )
        assert [r[0] for r in rows] == list(range(1, total + 1))  # gapless, no duplicates
        versions: dict[str, list[int]] = {}
        for _, agg, v in rows:
            versions.setdefault(agg, []).append(v)
        assert all(vs == list(range(1, len(vs) + 1)) for vs in versions.values())
        assert len(versions["shared"]) == procs * (per // 10)
        got = sorted(r.offset for r in await view.all())
        assert got == list(range(1, total + 1))  # the collector saw every offset once
        assert (await log.load("shared")).value == procs * (per // 10)


async def test_unique_violation_is_the_framework_concurrency_error(pg_url: str) -> None:
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment())
        with pytest.raises(rv.ConcurrencyError):
            await log.append("a", [Incremented()], expected_version=0)


def kill_connections(dbname: str | None) -> None:
    """Terminate every other connection to database ``dbname`` (as a server restart or
    an administrator would)."""
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={dbname}", autocommit=True) as c:
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


async def test_killed_connections_give_a_typed_error_and_recover(pg_url: str) -> None:
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment())
        kill_connections(app.store.db.url.database)
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(await log.execute("a", Increment()))
            except rv.StoreError as exc:  # typed, never a driver exception
                outcomes.append(exc)
        assert isinstance(outcomes[-1], rv.ExecuteResult)  # the store reconnected
        landed = sum(isinstance(o, rv.ExecuteResult) for o in outcomes)
        log.forget()
        assert (await log.load("a")).value == 1 + landed  # nothing half-written


async def test_replicas_starting_at_once_create_the_tables_once(pg_url: str) -> None:
    """Processes of one App starting together on an empty database (replicas of a
    deployment): no start fails on PostgreSQL's catalog (concurrent CREATE TABLE of one
    name) or on the relay's position row, and every table exists once."""
    procs = 4
    loop = asyncio.get_running_loop()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        start_at = time.time() + 4.0  # after the workers have imported: they collide
        counts = await asyncio.gather(
            *(loop.run_in_executor(pool, start_replica, pg_url, start_at) for _ in range(procs))
        )
    assert all(1 <= c <= procs for c in counts)
    app = rv.App(store=pg_url)
    app.event_log(Counter)
    view = app.collect(seen)
    async with app:
        await app.settle(timeout=30)
        assert await view.count() == procs  # each replica's event, once
        tables = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            ).all()
        )
    names = [t for (t,) in tables]
    assert {"rv_topics", "rv_read_models", "rv_relay", "rv_collector_leases"} <= set(names)
    assert sum(n.startswith("rm_seen_offsets") for n in names) == 1


async def test_a_notify_between_two_waits_is_not_lost(pg_url: str) -> None:
    reader, writer = rv.App(store=pg_url), rv.App(store=pg_url)
    reader.event_log(Counter)
    log = writer.event_log(Counter)
    async with reader, writer:
        store = reader.store
        seen = store.changes
        assert not await store.wait_for_change(0.3, seen)  # listening now; nothing yet
        await log.execute("a", Increment())  # another App: reaches reader by NOTIFY only
        deadline = asyncio.get_running_loop().time() + 30
        while store.changes == seen and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # arrives while nobody waits
        assert store.changes != seen
        # the next wait (from what the caller saw before) returns at once
        assert await asyncio.wait_for(store.wait_for_change(60.0, seen), 1.0)
