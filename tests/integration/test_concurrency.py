"""Several writers (threads, processes) on one aggregate of one SQLite file."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

import reventless as rv
from tests.integration.writers import write
from tests.model import Counter


async def _check(url: str, total: int) -> None:
    app = rv.App(store=url)
    log = app.event_log(Counter)
    async with app:
        rows = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                f"SELECT _offset, _version FROM {app.store.table_of('Counter')} ORDER BY _offset"
            ).all()
        )
        assert [o for o, _ in rows] == list(range(1, total + 1))  # gapless offsets
        assert [v for _, v in rows] == list(range(1, total + 1))  # one winner per version
        assert (await log.load("hot")).value == total  # nothing lost


def _init(url: str) -> None:
    async def main() -> None:
        app = rv.App(store=url)
        app.event_log(Counter)
        async with app:
            pass

    asyncio.run(main())


def test_threads_on_one_aggregate(file_url: str) -> None:
    _init(file_url)
    with ThreadPoolExecutor(4) as pool:
        landed = list(pool.map(write, [file_url] * 4, [40] * 4))
    assert landed == [40] * 4
    asyncio.run(_check(file_url, 160))


@pytest.mark.slow
def test_processes_on_one_aggregate(file_url: str) -> None:
    _init(file_url)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        landed = list(pool.map(write, [file_url] * 4, [40] * 4))
    assert landed == [40] * 4
    asyncio.run(_check(file_url, 160))
