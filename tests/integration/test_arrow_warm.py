"""PostgreSQL's Arrow reader connections open while an App with a collector of columns
starts (``Store.warm_columns``): its catch-up reads its pages on them and opens no more,
and a stop closes them all, also while they are still opening. The connections are
counted from the server's ``pg_stat_activity``."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import reventless as rv
from reventless.store import require_sql
from reventless.store.arrowread import ArrowPages
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
    """The number of client connections to the test's database, besides this one."""
    import psycopg
    from sqlalchemy.engine import make_url

    dbname = make_url(pg_url).database
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={dbname}", autocommit=True) as c:

        def count() -> int:
            row = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
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


async def test_a_catch_up_reads_on_the_connections_opened_at_start(
    pg_url: str, backends: Any
) -> None:
    pre = rv.App(store=pg_url)
    log = pre.event_log(Counter)
    async with pre:
        await log.append_many((f"c-{i}", [Incremented(by=1)] * 50, 0) for i in range(200))
    await _until(lambda: backends() == 0, "the loading app's connections closed")
    counter, seen = _batches()
    app = rv.App(store=pg_url, options=rv.AppOptions(collector=rv.CollectorOptions(page_size=500)))
    app.event_log(Counter)
    app.collect(counter)
    async with app:
        await app.settle(timeout=30)
        assert sum(seen) == 10_000 and len(seen) == 20  # pages of 500, every event once
        arrow: Any = app.store._arrow  # type: ignore[attr-defined]
        await _until(lambda: arrow._warming == 0, "the warming connections opened")
        assert len(arrow._idle) == arrow.ahead  # the pages were read on them, no others
        during = backends()
    assert during >= arrow.ahead
    await _until(lambda: backends() == 0, "every connection closed at stop")


async def test_a_stop_while_the_connections_open_closes_them(pg_url: str, backends: Any) -> None:
    counter, _ = _batches()
    app = rv.App(store=pg_url)
    app.event_log(Counter)
    app.collect(counter)
    await app.start()
    arrow: Any = app.store._arrow  # type: ignore[attr-defined]
    assert arrow._warming or arrow._idle  # opening (or, on a fast machine, open)
    await app.stop()
    # the threads that were still connecting close what they opened: nothing stays open
    await _until(lambda: arrow._warming == 0 and backends() == 0, "no connection left")


async def test_no_columns_no_connections_opened_ahead(pg_url: str) -> None:
    """A per-event handler reads rows on PostgreSQL: no Arrow connection is opened."""
    app = rv.App(store=pg_url)
    app.event_log(Counter)
    each = rv.SideEffectHandler("each")

    @each.on(Incremented)
    async def _one(ev: rv.Envelope[Incremented]) -> None:
        pass

    app.collect(each)
    async with app:
        arrow: Any = app.store._arrow  # type: ignore[attr-defined]
        assert arrow._warming == 0 and arrow._idle == []


async def test_a_reader_connection_never_closed_closes_when_dropped(pg_url: str) -> None:
    """The ADBC driver's own handles stay open on the server when dropped unclosed; the
    reader closes its connection when it is garbage-collected (an App dropped without
    ``stop``), as the driver's DB-API connection did."""
    import psycopg

    app = rv.App(store=pg_url)
    app.event_log(Counter)
    async with app:
        pages = ArrowPages(require_sql(app.store, "the test").db)
        table = await asyncio.to_thread(pages.page, "SELECT pg_backend_pid() AS pid", 1)
        assert table is not None
        [pid] = table.column("pid").to_pylist()
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres") as c:

            def alive() -> bool:
                sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                row = c.execute(sql, (pid,)).fetchone()
                c.commit()  # (each check a new snapshot of the activity)
                return row is not None and row[0] == 1

            assert alive()
            del pages, table
            gc.collect()
            await _until(lambda: not alive(), "the dropped reader's connection closed")
