"""Conditional appends under concurrent writers, at the store: 8 processes racing for the
same keys win each key exactly once (SQLite file, PostgreSQL), and on PostgreSQL appends
with disjoint lock keys do not wait for each other while appends with the same key do."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.store import AppendResult, require_sql
from reventless.store.dcb import condition_keys, lock_keys
from tests.dcb.dcb_writers import claim
from tests.dcb.store_model import EVENTS, NoteTaken

WRITERS = 8
KEYS = [f"k{i}" for i in range(12)]


async def _create(url: str) -> None:
    app = rv.App(store=url)
    app.dcb_log("claims", events=EVENTS)
    async with app:
        pass


async def _stored_claims(url: str) -> Counter[str]:
    app = rv.App(store=url)
    log = app.dcb_log("claims", events=EVENTS)
    async with app:
        events = await log.read(rv.Query.all())
        assert [e.offset for e in events] == list(range(1, len(events) + 1))  # gapless
        return Counter(t for e in events for t in e.tags)


def _race(url: str) -> None:
    asyncio.run(_create(url))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(WRITERS, mp_context=ctx) as pool:
        barrier = manager.Barrier(WRITERS)
        futures = [pool.submit(claim, url, KEYS, barrier, seed) for seed in range(WRITERS)]
        won = [k for f in futures for k in f.result(timeout=240)]
    assert sorted(won) == sorted(KEYS)  # each key won by exactly one writer
    stored = asyncio.run(_stored_claims(url))
    assert stored == Counter({f"claimed:{k}": 1 for k in KEYS})  # ... and the store agrees


@pytest.mark.slow
def test_processes_race_for_keys_on_a_sqlite_file(tmp_path: Path) -> None:
    _race(f"sqlite:///{tmp_path / 'claims.db'}")


@pytest.mark.slow
@pytest.mark.postgres
def test_processes_race_for_keys_on_postgres(pg_url: str) -> None:
    _race(pg_url)


async def _waiting(app: rv.App, key: int) -> int:
    """How many transactions wait for advisory lock ``key`` (a bigint key) in this database."""
    store = require_sql(app.store, "the lock test")
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    sql = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND objsubid = 1 AND classid::text::bigint = %s AND objid::text::bigint = %s "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )

    def work(conn: Any) -> int:
        return int(conn.exec_driver_sql(sql, (unsigned >> 32, unsigned & 0xFFFF_FFFF)).scalar())

    return await store.db.read(work)


@pytest.mark.postgres
async def test_disjoint_keys_do_not_serialise(pg_url: str) -> None:
    import psycopg

    app = rv.App(store=pg_url)
    log = app.dcb_log("claims", events=EVENTS)
    async with app:
        await log.append([NoteTaken(text="first")])
        # Another transaction in its check phase for tag "claimed:a": it holds the key's
        # lock as a conditional append does (same key, same statement), and stays open.
        keys, _ = condition_keys("claims", rv.Query.of(tags=["claimed:a"]))
        [(sql, params)] = lock_keys(set(), keys)
        plain = pg_url.replace("postgresql+psycopg://", "postgresql://").partition("?")[0]
        holder = await psycopg.AsyncConnection.connect(plain)
        try:
            await holder.execute(sql, params)  # the holder's transaction stays open
            cond_a = rv.AppendCondition(rv.Query.of(tags=["claimed:a"]))
            same = asyncio.create_task(
                log.append([NoteTaken(text="a")], condition=cond_a, tags=["claimed:a"])
            )
            writer = asyncio.create_task(log.append([NoteTaken(text="w")], tags=["claimed:a"]))
            async with asyncio.timeout(30):  # both wait for the key (seen in pg_locks)
                while await _waiting(app, next(iter(keys))) < 2:
                    await asyncio.sleep(0.01)
            # appends with other keys go through while those two wait
            cond_b = rv.AppendCondition(rv.Query.of(tags=["claimed:b"]))
            async with asyncio.timeout(30):
                b = await log.append([NoteTaken(text="b")], condition=cond_b, tags=["claimed:b"])
                c = await log.append([NoteTaken(text="c")], tags=["claimed:c"])
            assert (b.first_offset, c.first_offset) == (2, 3)
            assert not same.done() and not writer.done()
            assert await _waiting(app, next(iter(keys))) == 2
            await holder.rollback()  # the holder ends: the two go on, one after the other
            async with asyncio.timeout(30):
                conditional, _ = await asyncio.gather(same, writer, return_exceptions=True)
        finally:
            await holder.close()
        landed = {e.event.text: e.offset for e in await log.read(rv.Query.all())}
        assert landed["first"] == 1 and landed["b"] == 2 and landed["c"] == 3
        if "a" in landed:  # the conditional append got the key first: the writer came after
            assert isinstance(conditional, AppendResult)
            assert landed["a"] == 4 and landed["w"] == 5
        else:  # the writer got it first: the check saw its event and failed, landing nothing
            assert isinstance(conditional, rv.AppendConditionError)
            assert conditional.position == landed["w"] == 4
            assert len(landed) == 4
