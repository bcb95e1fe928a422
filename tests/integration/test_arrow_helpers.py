"""A SQLite file's and PostgreSQL's Arrow pages come from helper processes (never from a
second SQLite library in the store's process, nor from a PostgreSQL driver that aborts
its process on a lost connection); helpers that die or never start leave reads to rows;
closing the store stops them."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import reventless as rv
from reventless.store import arrowhelper
from tests.arrow_pages import counting, helpers_ready
from tests.integration.test_bulk_execute import Noted, Notes


def pool_of(app: rv.App) -> arrowhelper.HelperPool:
    pool = app.store._arrow._helpers  # type: ignore[attr-defined]
    assert isinstance(pool, arrowhelper.HelperPool)
    return pool


def notes_app(url: str) -> tuple[rv.App, rv.EventLog[Any]]:
    """An App on ``url`` with the ``Notes`` log."""
    app = rv.App(store=url)
    return app, app.event_log(Notes)


async def noted(app: rv.App, log: rv.EventLog[Any], n: int) -> None:
    """``n`` notes appended, and the helpers ready."""
    await log.append_many([(f"n-{k}", [Noted(ratio=k)], 0) for k in range(n)])
    await helpers_ready(app)


def pages_at_once(app: rv.App, log: rv.EventLog[Any], n: int) -> Any:
    """``n`` pages of 500 from offset 1, all asked at once."""
    return asyncio.gather(*(app.store.read_columns(log.name, 1 + 500 * i, 500) for i in range(n)))


def page_offsets(n: int) -> list[list[int]]:
    """The offsets of ``pages_at_once(n)``, page by page."""
    return [list(range(1 + 500 * i, 501 + 500 * i)) for i in range(n)]


async def test_pages_come_from_helpers_while_the_store_writes(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``adbc-driver-sqlite`` carries its own SQLite: two copies of the library in one
    process that open one file break each other's locks and WAL index (a reader crashed
    with SIGBUS while the store wrote). Its pages come from helper processes, as Arrow,
    while appends commit beside them; the driver never loads in the store's process."""
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k / 3)], 0) for k in range(1500)])
        await helpers_ready(app)

        async def write() -> None:
            for k in range(300):
                await log.append(f"w-{k}", [Noted(ratio=k)], expected_version=0)

        writing = asyncio.ensure_future(write())
        reads = 0
        while not writing.done() or reads < 3:
            batches = [b async for b in log.read_batches(batch_size=100)]
            offsets = [o for b in batches for o in b.column("_offset").to_pylist()]
            assert offsets == list(range(1, len(offsets) + 1)) and len(offsets) >= 1500
            reads += 1
        await writing
        assert await log.head() == 1800
        got = [r for b in [b async for b in log.read_batches()] for r in b.column("ratio")]
        assert [r.as_py() for r in got] == [k / 3 for k in range(1500)] + list(range(300))
    assert pages and all(n > 0 for n in pages)  # every page came as Arrow
    assert "adbc_driver_sqlite" not in sys.modules


async def test_a_short_read_starts_no_helper_and_a_long_one_does(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 3000)
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k)], 0) for k in range(2500)])
        assert sum([b.num_rows async for b in log.read_batches(batch_size=500)]) == 2500
        pool = pool_of(app)
        assert pool.ready() == 0 and not pool._starting  # 2,500 rows: no helper
        assert pages == []  # ...and its pages went straight to rows, no hop to ask one
        await log.append_many([(f"m-{k}", [Noted(ratio=k)], 0) for k in range(1000)])
        assert sum([b.num_rows async for b in log.read_batches(batch_size=500)]) == 3500
        assert pool._starting or pool.ready()  # 3,500 rows: helpers start
    assert pages and all(n == -1 for n in pages[:5])  # the long read: rows while they start


async def test_a_helper_that_dies_leaves_its_page_to_rows(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = counting(monkeypatch)
    app, log = notes_app(shared_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k / 3)], 0) for k in range(2100)])
        await helpers_ready(app)
        pool = pool_of(app)
        for helper in pool._ready:
            helper.proc.kill()
            helper.proc.wait()
        batches = [b async for b in log.read_batches(batch_size=1000)]
        assert pool.ready() == 0  # dropped, and none starts for RETRY_AFTER seconds
    assert [b.num_rows for b in batches] == [1000, 1000, 100]
    assert [r for b in batches for r in b.column("ratio").to_pylist()] == [
        k / 3 for k in range(2100)
    ]
    assert pages.count(-1) >= 2  # the pages the dead helpers were asked for: rows


async def test_a_helper_that_cannot_start_leaves_reads_to_rows(
    shared_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(arrowhelper, "_CHILD", arrowhelper._CHILD.with_name("missing.py"))
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 0)
    app, log = notes_app(shared_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k)], 0) for k in range(1500)])
        pool = pool_of(app)
        pool.warm()
        async with asyncio.timeout(30):
            while pool._starting:  # they exit at once: no such script
                assert [b.num_rows async for b in log.read_batches(batch_size=1000)] == [1000, 500]
                await asyncio.sleep(0.01)
        assert [b.num_rows async for b in log.read_batches(batch_size=1000)] == [1000, 500]
        assert pool.ready() == 0
    assert "Arrow reads go through rows" in caplog.text


async def test_closing_the_store_stops_its_helpers(shared_url: str) -> None:
    app, log = notes_app(shared_url)
    async with app:
        await log.append("n-0", [Noted(ratio=1)], expected_version=0)
        await helpers_ready(app)
        procs = [h.proc for h in pool_of(app)._ready]
        assert len(procs) == arrowhelper.HELPERS and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)


async def test_more_pages_at_once_than_helpers_wait_for_one(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten pages read at once by two ready helpers: four are asked at once (two each, a
    helper reads its second while its first is taken in), the others wait for the next
    answer (milliseconds) instead of falling back to rows, and all are exact."""
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await noted(app, log, 5000)
        got = await pages_at_once(app, log, 10)
    assert all(isinstance(t, pa.Table) for t in got)
    assert [t.column(0).to_pylist() for t in got] == page_offsets(10)
    assert sorted(pages) == [500] * 10


async def test_the_pages_of_a_read_reach_the_helpers_in_its_order(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read's pages are asked of the helpers from the event loop, in offset order, while
    one has room: a helper never reads a later page while the read waits on an earlier
    one behind it (threads racing to ask did that, leaving the other helper idle)."""
    asked: list[tuple[int, int]] = []  # (helper, first offset), in the order sent
    send = arrowhelper.Helper.send

    def spied(self: arrowhelper.Helper, sql: str, rows: int) -> int:
        ticket = send(self, sql, rows)
        asked.append((id(self), int(sql.split("_offset >= ")[1].split()[0])))
        return ticket

    monkeypatch.setattr(arrowhelper.Helper, "send", spied)
    app, log = notes_app(file_url)
    async with app:
        await noted(app, log, 12_000)
        for _ in range(3):
            del asked[:]
            offsets = [o async for b in log.read_batches(batch_size=500) for o in b["_offset"]]
            assert [o.as_py() for o in offsets] == list(range(1, 12_001))
            assert [start for _, start in asked] == list(range(1, 12_001, 500))
            # both helpers read: four pages are asked at once, two of each
            assert len({helper for helper, _ in asked[:4]}) == arrowhelper.HELPERS


async def test_a_read_left_after_its_first_batch_leaves_the_helpers_free(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages asked of the helpers are answered even when the read that asked them stops
    early (its pending pages cancelled): every helper ends with nothing asked, and the
    next read gets every page as Arrow, in order."""
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await noted(app, log, 12_000)
        pool = pool_of(app)
        for _ in range(3):
            async for _batch in log.read_batches(batch_size=500):
                break
        async with asyncio.timeout(30):
            while any(h.load for h in pool._ready):
                await asyncio.sleep(0.01)
        del pages[:]
        offsets = [o async for b in log.read_batches(batch_size=500) for o in b["_offset"]]
        assert [o.as_py() for o in offsets] == list(range(1, 12_001))
    assert pages == [500] * 24  # all of them Arrow pages


async def test_helpers_read_only_the_columns_asked(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await noted(app, log, 25_000)
        full = pa.Table.from_batches([b async for b in log.read_batches()])
        del pages[:]
        names = ["ratio", "_offset", "_msg_id"]
        some = pa.Table.from_batches([b async for b in log.read_batches(columns=names)])
    assert sorted(pages) == [5_000, 10_000, 10_000]  # all of them Arrow pages (helpers)
    assert some.equals(full.select(names))


async def test_a_helper_that_dies_with_pages_asked_leaves_them_all_to_rows(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are pipelined (two asked of each helper): a helper that dies with both asked
    fails both, and both are read as rows, exact."""
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await noted(app, log, 2000)
        pool = pool_of(app)
        helpers = list(pool._ready)
        for helper in helpers:  # they take the asks into their pipes, and answer none
            os.kill(helper.proc.pid, signal.SIGSTOP)
        reads = pages_at_once(app, log, 4)
        async with asyncio.timeout(30):
            while sum(h.load for h in helpers) < 4:
                await asyncio.sleep(0.01)
        assert [h.load for h in helpers] == [2, 2]
        for helper in helpers:
            helper.proc.kill()
        got = await reads
        assert pool.ready() == 0
    assert all(isinstance(t, list) for t in got)
    assert [[r[0] for r in t] for t in got] == page_offsets(4)
    assert pages == [-1] * 4


async def test_pages_start_at_the_first_event_retention_left(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages are read ahead as ranges of offsets from the first event stored at or after
    the read's start: after retention deleted a prefix, a read from offset 1 reads no
    empty pages, and its batches are full and exact."""
    from reventless.subscribe import Retention, Subscriptions
    from tests.subscribe.conftest import order_rows, orders_app

    pages = counting(monkeypatch)
    app, topic = orders_app(shared_url)
    async with app, Subscriptions(app.store.db):
        await topic.publish(order_rows(3000))
        retention = Retention(app.store.db)
        await retention.set("orders", max_count=1100)
        assert await retention.apply() == {"orders": 1900}
        await helpers_ready(app)
        batches = [b async for b in topic.read_batches(batch_size=500)]
    assert [b.num_rows for b in batches] == [500, 500, 100]
    offsets = [o for b in batches for o in b.column("_offset").to_pylist()]
    assert offsets == list(range(1901, 3001))
    assert [b.column("qty").to_pylist() for b in batches][2] == list(range(2900, 3000))
    assert sorted(pages) == [100, 500, 500]  # every page read was one of them, as Arrow


async def test_a_long_read_waits_for_its_helper_instead_of_reading_rows(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 1000)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 2000)
    pages = counting(monkeypatch)
    app, log = notes_app(file_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k)], 0) for k in range(3000)])
        batches = [b async for b in log.read_batches(batch_size=500)]
    assert [r for b in batches for r in b.column("ratio").to_pylist()] == list(range(3000))
    # the three pages with 2,000 rows or more left waited for the helper (the others came
    # as rows if they were asked before it was ready)
    assert len(pages) == 6 and pages.count(500) >= 3


async def test_a_helper_that_never_gets_ready_is_dropped(
    file_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A helper that hangs before it is ready: the pages that wait for it give up after
    the start limit, are read as rows, and it is killed."""
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(600)\n")
    monkeypatch.setattr(arrowhelper, "_CHILD", hang)
    monkeypatch.setattr(arrowhelper, "_START_LIMIT", 0.5)
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 100)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 100)
    app, log = notes_app(file_url)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k)], 0) for k in range(1500)])
        pool = pool_of(app)
        got = [b.num_rows async for b in log.read_batches(batch_size=500)]
        assert got == [500, 500, 500] and pool.ready() == 0 and not pool._starting
    assert "did not start within" in caplog.text


def _import_in_child(tmp_path: Path, fake_pyarrow: str | None) -> str:
    """What ``_arrowchild._import_pyarrow`` leaves in a fresh interpreter: whether numpy
    is importable after it. ``fake_pyarrow``: the source of a stand-in pyarrow that comes
    first on the path (and a stand-in numpy beside it)."""
    import subprocess

    child = Path(arrowhelper.__file__).with_name("_arrowchild.py")
    path = [str(child.parent)]
    if fake_pyarrow is not None:
        (tmp_path / "pyarrow").mkdir()
        (tmp_path / "pyarrow" / "__init__.py").write_text(fake_pyarrow)
        (tmp_path / "numpy.py").write_text("REAL = True\n")
        path.insert(0, str(tmp_path))
    code = (
        f"import sys; sys.path[:0] = {path!r}\n"
        "import _arrowchild; _arrowchild._import_pyarrow()\n"
        "import pyarrow\n"
        "try:\n    import numpy\nexcept ImportError:\n    print('no numpy')\n"
        "else:\n    print('numpy')\n"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_a_helper_imports_pyarrow_without_numpy(tmp_path: Path) -> None:
    assert _import_in_child(tmp_path, None) == "no numpy"


def test_a_pyarrow_that_needs_numpy_gets_it(tmp_path: Path) -> None:
    # an older pyarrow imports numpy unconditionally: the helper takes numpy after all
    assert _import_in_child(tmp_path, "import numpy\nassert numpy.REAL\n") == "numpy"
