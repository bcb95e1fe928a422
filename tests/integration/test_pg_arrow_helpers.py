"""PostgreSQL's Arrow pages are read by helper processes, each on a connection of its own
(``application_name`` ``reventless-arrow``): a long catch-up reads its pages through
them, and a stop closes every one of their connections, as does an App's reader dropped
without a stop. The connections are counted from the server's ``pg_stat_activity``."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import reventless as rv
from reventless.store import arrowhelper, require_sql
from reventless.store.arrowread import ArrowPages
from tests.arrow_pages import counting
from tests.model import Counter, Incremented

pytestmark = pytest.mark.postgres


def _batches() -> tuple[rv.SideEffectHandler, list[int]]:
    seen: list[int] = []
    counter = rv.SideEffectHandler("batches")

    @counter.on_batch(Incremented, columns=["by"])
    async def _count(batch: rv.EventBatch[Incremented]) -> None:
        seen.append(len(batch))

    return counter, seen


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    """A database of the test's own, not a schema of the run's: the connections counted in
    ``pg_stat_activity`` are then the test's alone, whatever an earlier test on this worker
    left open (a clean-clone run once failed here on a connection not of this test)."""
    import psycopg
    from sqlalchemy.engine import make_url

    run = make_url(pg_database)
    name = f"{run.database}_{uuid.uuid4().hex[:6]}"
    admin = f"host={run.host} port={run.port or 5432} user={run.username} dbname={run.database}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    yield run.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def backends(pg_url: str) -> Iterator[Any]:
    """The number of the helpers' connections to the test's database."""
    import psycopg
    from sqlalchemy.engine import make_url

    dbname = make_url(pg_url).database
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={dbname}", autocommit=True) as c:

        def count() -> int:
            row = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND application_name = 'reventless-arrow'",
                (dbname,),
            ).fetchone()
            assert row is not None
            return int(row[0])

        yield count


async def _until(check: Any, what: str, timeout: float = 20.0) -> None:
    """Wait for ``check()`` to hold (``what``: the failure's message)."""
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


async def test_a_long_catch_up_reads_its_pages_through_the_helpers(
    pg_url: str, backends: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pre = rv.App(store=pg_url)
    log = pre.event_log(Counter)
    async with pre:
        await log.append_many((f"c-{i}", [Incremented(by=1)] * 100, 0) for i in range(300))
    pages = counting(monkeypatch)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 1)  # its first page waits for a helper
    counter, seen = _batches()
    app = rv.App(store=pg_url, options=rv.AppOptions(collector=rv.CollectorOptions(page_size=500)))
    app.event_log(Counter)
    app.collect(counter)
    async with app:
        await app.settle(timeout=60)
        assert sum(seen) == 30_000 and len(seen) == 60  # pages of 500, every event once
        during = backends()
    # 30,000 events to read (over ``SPAWN_AT``): a helper starts with the first page,
    # which waits for it; every page comes from it as Arrow (and the empty ones asked
    # ahead past the head)
    assert -1 not in pages and [n for n in pages if n] == [500] * 60, pages
    assert 1 <= during <= arrowhelper.HELPERS  # (a catch-up, two pages ahead: one helper)
    await _until(lambda: backends() == 0, "every helper's connection closed at stop")


async def test_a_reader_dropped_without_stop_leaves_no_connection(
    pg_url: str, backends: Any
) -> None:
    """A reader never closed (an App dropped without ``stop``): its helpers' pipes close
    when it is garbage-collected, and they exit, closing their connections."""
    app = rv.App(store=pg_url)
    app.event_log(Counter)
    async with app:
        pages = ArrowPages(require_sql(app.store, "the test").db)
        sql = "SELECT pg_backend_pid() AS pid"  # a long read's page: it waits for a helper
        table = await asyncio.to_thread(pages.page, sql, 1, arrowhelper.WAIT_AT)
        assert table is not None and backends() == 1
        del pages, table
        gc.collect()
        await _until(lambda: backends() == 0, "the dropped reader's helper gone")
