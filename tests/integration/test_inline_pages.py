"""A read model's page on a SQLite file commits on the event loop's thread once nothing
else is ready to run there (``store/collector.py``: ``alone_soon``), and on the writer
thread while other work is ready. Either way its rows, dead letters and checkpoint land
in the page's one transaction: read back from the store."""

from __future__ import annotations

import threading
from pathlib import Path

import reventless as rv
from reventless.store import require_sql
from tests.company import company
from tests.model import Counter, Incremented, Total

AGGREGATES, PER = 50, 100  # 5,000 events: three pages of a catch-up, and more live


def counted_view(threads: list[bool], poison: str | None = None) -> rv.ReadModel[Total]:
    """Totals whose handler records whether it ran on the calling (the loop's) thread."""
    loop_thread = threading.get_ident()
    view = rv.ReadModel("inline_totals", row=Total, key="id")

    @view.on(Incremented)
    def _total(ev: rv.Envelope[Incremented], current: Total | None) -> rv.Upsert[Total]:
        threads.append(threading.get_ident() == loop_thread)
        assert ev.aggregate_id is not None
        if ev.aggregate_id == poison:
            raise ValueError("cannot project poison")
        row = current or Total(id=ev.aggregate_id, value=0, events=0)
        return rv.Upsert(Total(id=row.id, value=row.value + ev.event.by, events=row.events + 1))

    return view


async def preload(url: str, poison: str | None = None) -> None:
    app = rv.App(store=url)
    log = app.event_log(Counter)
    async with app:
        ids = [f"c-{i:02d}" for i in range(AGGREGATES)] + ([poison] if poison else [])
        for v in range(PER):
            await log.append_many((a, [Incremented(by=1)], v) for a in ids)


async def stored_totals(app: rv.App) -> dict[str, tuple[int, int]]:
    store = require_sql(app.store, "the test")
    rows = await store.db.read(
        lambda conn: conn.exec_driver_sql("SELECT id, value, events FROM rm_inline_totals").all()
    )
    return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}


async def stored_checkpoint(app: rv.App) -> int:
    store = require_sql(app.store, "the test")
    return int(
        await store.db.read(
            lambda conn: conn.exec_driver_sql(
                "SELECT \"offset\" FROM rv_checkpoints WHERE component = 'inline_totals'"
            ).scalar_one()
        )
    )


async def test_a_catch_up_applies_its_pages_on_the_loop_thread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    await preload(url, poison="poison")
    threads: list[bool] = []
    app = rv.App(store=url)
    app.event_log(Counter)
    view = app.collect(counted_view(threads, poison="poison"))
    async with app:
        await app.settle()
        assert len(threads) >= AGGREGATES * PER and any(threads)
        assert await stored_totals(app) == {f"c-{i:02d}": (PER, PER) for i in range(AGGREGATES)}
        assert await stored_checkpoint(app) == (AGGREGATES + 1) * PER
        letters = await view.dead_letters()
        assert letters and {d.aggregate_id for d in letters} == {"poison"}


async def test_pages_with_company_are_applied_on_the_writer_thread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    await preload(url)
    threads: list[bool] = []
    app = rv.App(store=url)
    app.event_log(Counter)
    app.collect(counted_view(threads))
    async with company(), app:  # the loop is never alone
        await app.settle()
        assert threads and not any(threads)
        assert await stored_totals(app) == {f"c-{i:02d}": (PER, PER) for i in range(AGGREGATES)}
        assert await stored_checkpoint(app) == AGGREGATES * PER


async def test_inline_writes_off_keeps_the_pages_on_the_writer_thread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    await preload(url)
    threads: list[bool] = []
    app = rv.App(store=url, options=rv.AppOptions(store=rv.StoreOptions(inline_writes=False)))
    app.event_log(Counter)
    app.collect(counted_view(threads))
    async with app:
        await app.settle()
        assert threads and not any(threads)
        assert await stored_checkpoint(app) == AGGREGATES * PER
