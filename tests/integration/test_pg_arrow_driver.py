"""PostgreSQL's Arrow pages are read by ``adbc-driver-postgresql`` before 1.9 (the
releases that read a page with the least CPU), whose releases from 1.8.0 to 1.10.0 abort
their process (SIGABRT) when a read finds its connection gone. They run in the store's
helper processes: a lost connection ends at most a helper, and its pages come through
rows; the App goes on, and its reads return every event once."""

from __future__ import annotations

import psycopg
import pytest

import reventless as rv
from reventless.store import arrowhelper
from tests.arrow_pages import counting, helpers_ready
from tests.integration.test_bulk_execute import Noted, Notes

pytestmark = pytest.mark.postgres


async def test_a_read_on_a_lost_connection_leaves_the_app_running(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = counting(monkeypatch)
    app = rv.App(store=pg_url)
    log = app.event_log(Notes)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k / 3)], 0) for k in range(2100)])
        await helpers_ready(app)
        pool: arrowhelper.HelperPool = app.store._arrow._helpers  # type: ignore[attr-defined]
        procs = [h.proc for h in pool._ready]
        plain = pg_url.split("?")[0].replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(plain, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'reventless-arrow'"
            ).fetchall()
        assert len(ended) == arrowhelper.HELPERS
        batches = [b async for b in log.read_batches(batch_size=1000)]
        # the App's own reads go on (its connections were not the ones ended)
        assert await log.head() == 2100
        # those helpers were dropped (none starts again for ``RETRY_AFTER`` seconds), and
        # ended (1.8.0: SIGABRT; a release that raises instead: they were closed)
        assert not any(h.proc in procs for h in pool._ready)
        assert all(p.wait(timeout=10) is not None for p in procs)
    assert [b.num_rows for b in batches] == [1000, 1000, 100]
    assert [r for b in batches for r in b.column("ratio").to_pylist()] == [
        k / 3 for k in range(2100)
    ]
    assert -1 in pages  # a page a helper could not read: rows
