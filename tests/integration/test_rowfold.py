"""Column-upsert read models folded from stored rows equal the handlers' rows exactly."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, field_validator

import reventless as rv
from reventless.collect.kinds import ReadModelCollector
from reventless.collect.rowfold import RowFold
from tests.arrow_pages import arrow_widths, counting


class Sold(rv.Event):
    sku: str
    qty: int
    price: float
    note: str | None = None
    gift: bool = False


class Returned(rv.Event):
    sku: str
    qty: int = 1


class Till(rv.Aggregate):
    events = Sold | Returned

    @rv.applies(Sold)
    def _sold(self, e: Sold) -> None:
        pass

    @rv.applies(Returned)
    def _returned(self, e: Returned) -> None:
        pass


async def append(log: rv.EventLog[Till], till: str, events: list[Any], at: dict[str, int]) -> None:
    await log.append(till, events, expected_version=at.get(till, 0))
    at[till] = at.get(till, 0) + len(events)


class SkuStats(BaseModel):
    sku: str
    units: int = 0
    revenue: float = 0.0
    sales: int = 0
    returns: int = 0
    last_note: str | None = None
    last_till: str = ""
    last_offset: int = 0
    gift: bool = False


def sku_stats(name: str) -> rv.ReadModel[SkuStats]:
    model = rv.ReadModel(name, row=SkuStats, key="sku")
    ups = rv.ColumnUpserts(model, key="sku")
    ups.on(
        Sold,
        latest={"last_note": "note", "last_till": "_aggregate_id", "gift": "gift"},
        add={"units": "qty", "revenue": "price", "sales": 1},
    )
    ups.on(Returned, latest={"last_offset": "_offset"}, add={"returns": "qty"})
    return model


def collector(app: rv.App, name: str) -> ReadModelCollector:
    c = app._collectors[name]
    assert isinstance(c, ReadModelCollector)
    return c


sold = st.builds(
    Sold,
    sku=st.sampled_from(["a", "b", "c"]),
    qty=st.integers(-5, 50),
    price=st.floats(-1e6, 1e6, allow_nan=False, width=64),
    note=st.none() | st.text(max_size=5),
    gift=st.booleans(),
)
returned = st.builds(Returned, sku=st.sampled_from(["a", "b", "d"]), qty=st.integers(0, 3))
batches = st.lists(
    st.tuples(st.sampled_from(["t1", "t2"]), st.lists(sold | returned, min_size=1, max_size=8)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=25)
@given(batches, st.integers(1, 7))
def test_fold_equals_handlers(batches: list[tuple[str, list[Any]]], page: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_parity(Path(tmp), batches, page))


async def _parity(tmp: Path, batches: list[tuple[str, list[Any]]], page: int) -> None:
    opts = rv.AppOptions(collector=rv.CollectorOptions(page_size=page, poll_interval=0.05))
    app = rv.App(store=f"sqlite:///{tmp / 's.db'}", options=opts)
    log = app.event_log(Till)
    folded = app.collect(sku_stats("fold"))
    handled = app.collect(sku_stats("handlers"))
    async with app:
        collector(app, "handlers").folds.clear()  # the same model through its handlers
        assert set(collector(app, "fold").folds) == {"Till"}
        at: dict[str, int] = {}
        for till, events in batches:
            await append(log, till, events, at)
        await app.settle()
        got, want = await folded.all(), await handled.all()
        assert [r.model_dump() for r in got] == [r.model_dump() for r in want]
        n = sum(len(e) for _, e in batches)
        assert collector(app, "fold").folded == n
        assert collector(app, "handlers").folded == 0
    # A fresh model catching up from the store: the same rows again (a SQLite file is read
    # as rows, never through ADBC: see arrowread.py; PostgreSQL's Arrow pages are below).
    late = rv.App(store=f"sqlite:///{tmp / 's.db'}", options=opts)
    late.event_log(Till)
    caught = late.collect(sku_stats("fold_late"))
    async with late:
        await late.settle()
        assert [r.model_dump() for r in await caught.all()] == [r.model_dump() for r in want]
        assert collector(late, "fold_late").folded == n


@pytest.mark.postgres
async def test_a_fold_catches_up_from_arrow_pages_on_postgres(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh model catching up from PostgreSQL folds pages of Arrow columns (ADBC), of
    which it reads only its own, into the rows its handlers make of the same log."""
    opts = rv.AppOptions(collector=rv.CollectorOptions(page_size=7, poll_interval=0.05))
    writer = rv.App(store=pg_url, options=opts)
    log = writer.event_log(Till)
    handled = writer.collect(sku_stats("handlers"))
    async with writer:
        collector(writer, "handlers").folds.clear()
        at: dict[str, int] = {}
        for k in range(40):
            events: list[Any] = [
                Sold(sku="abc"[k % 3], qty=k - 5, price=k / 7, note=None if k % 4 else f"n{k}")
            ]
            if k % 5 == 0:
                events.append(Returned(sku="abd"[k % 3], qty=k % 3))
            await append(log, f"t{k % 2}", events, at)
        await writer.settle()
        want = [r.model_dump() for r in await handled.all()]
    late = rv.App(store=pg_url, options=opts)
    late.event_log(Till)
    caught = late.collect(sku_stats("fold_late"))
    arrow = counting(monkeypatch)
    widths = arrow_widths(monkeypatch)
    async with late:
        await late.settle()
        assert [r.model_dump() for r in await caught.all()] == want
        assert collector(late, "fold_late").folded == sum(at.values())
        narrow = collector(late, "fold_late").projected["Till"]
    assert arrow and all(n >= 0 for n in arrow)  # every page came as Arrow
    # ...of the columns the fold reads and the collector's own only
    assert set(narrow) == {
        *("_offset", "_aggregate_id", "_type", "_trace", "_schema_version"),
        *("sku", "qty", "price", "note", "gift"),
    }
    assert set(widths) == {len(narrow)}


async def test_fold_resumes_from_stored_rows(file_url: str) -> None:
    """Rows already in the table are the fold's starting point (restart, later pages)."""
    for rnd in range(2):
        app = rv.App(store=file_url)
        log = app.event_log(Till)
        view = app.collect(sku_stats("fold"))
        async with app:
            await append(log, f"t{rnd}", [Sold(sku="a", qty=2, price=1.5)] * 3, {})
            await app.settle()
            row = await view.get("a")
            assert row is not None and (row.units, row.sales) == (6 * (rnd + 1), 3 * (rnd + 1))
            assert row.revenue == 4.5 * (rnd + 1) and row.last_till == f"t{rnd}"


async def test_a_failing_upsert_dead_letters_through_the_handlers(file_url: str) -> None:
    """A fold that cannot apply (a counter on a text column) lands nothing: the page goes
    through the handlers, which dead-letter the event and park its aggregate."""

    class Odd(BaseModel):
        sku: str
        label: str = ""

    model = rv.ReadModel("odd", row=Odd, key="sku")
    rv.ColumnUpserts(model, key="sku").on(Sold, add={"label": "qty"})
    app = rv.App(store=file_url)
    log = app.event_log(Till)
    view = app.collect(model)
    async with app:
        await append(log, "t1", [Sold(sku="a", qty=1, price=1.0)], {})
        await app.settle()
        assert await view.all() == []
        letters = await app.dead_letters()
        assert [(d.component, d.offset) for d in letters] == [("odd", 1)]
        assert collector(app, "odd").folded == 0


async def test_a_fold_that_is_not_exact_reads_its_narrow_page_again(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catch-up page read with the fold's columns only, on which the fold cannot apply:
    the handlers run on the page read again whole, and dead-letter its events."""

    class Odd(BaseModel):
        sku: str
        label: str = ""

    writer = rv.App(store=shared_url)
    log = writer.event_log(Till)
    async with writer:
        await append(log, "t1", [Sold(sku="a", qty=1, price=1.0, note="x")] * 3, {})
        stored = [e.msg_id for e in await log.read()]
    model = rv.ReadModel("odd", row=Odd, key="sku")
    rv.ColumnUpserts(model, key="sku").on(Sold, add={"label": "qty"})
    widths = arrow_widths(monkeypatch)
    app = rv.App(store=shared_url)
    app.event_log(Till)
    view = app.collect(model)
    async with app:
        await app.settle()
        assert await view.all() == []
        letters = await app.dead_letters()
        assert [(d.offset, d.msg_id) for d in letters] == list(zip([1, 2, 3], stored, strict=True))
        assert collector(app, "odd").folded == 0
    assert widths and all(w < 17 for w in widths)  # the page the fold tried was narrow


def test_only_exact_folds_compile() -> None:
    class Checked(rv.Event):
        sku: str
        qty: int

        @field_validator("qty")
        @classmethod
        def _pos(cls, v: int) -> int:
            return abs(v)

    class Shop(rv.Aggregate):
        events = Checked | Sold

        @rv.applies(Checked)
        def _checked(self, e: Checked) -> None:
            pass

        @rv.applies(Sold)
        def _sold(self, e: Sold) -> None:
            pass

    app = rv.App(store="sqlite://")
    app.event_log(Shop)
    topic = app._topics["Shop"].definition

    class Row(BaseModel):
        sku: str
        n: int = 0

    def handlers(model: rv.ReadModel[Any]) -> dict[str, Any]:
        return {e.event_type: s for e, s in model.handlers.items()}

    validated = rv.ReadModel("v", row=Row, key="sku")
    rv.ColumnUpserts(validated, key="sku").on(Checked, add={"n": "qty"})
    assert RowFold.compile(validated, topic, handlers(validated)) is None  # a validator

    plain = rv.ReadModel("p", row=Row, key="sku")
    rv.ColumnUpserts(plain, key="sku").on(Sold, add={"n": "qty"})
    assert RowFold.compile(plain, topic, handlers(plain)) is not None

    mixed = rv.ReadModel("m", row=Row, key="sku")
    rv.ColumnUpserts(mixed, key="sku").on(Sold, add={"n": "qty"})

    @mixed.on(Checked)
    def _hand(ev: rv.Envelope[Checked], cur: Row | None) -> rv.Upsert[Row]:
        return rv.Upsert(Row(sku=ev.event.sku, n=(cur.n if cur else 0) + 1))

    assert RowFold.compile(mixed, topic, handlers(mixed)) is None  # a hand-written handler


def test_old_schema_versions_go_through_the_handlers() -> None:
    app = rv.App(store="sqlite://")
    app.event_log(Till)
    topic = app._topics["Till"].definition
    model = sku_stats("x")
    fold = RowFold.compile(model, topic, {e.event_type: s for e, s in model.handlers.items()})
    assert fold is not None
    width = len(rv.codec.META_NAMES) + len(topic.schema.columns)
    row = [None] * width
    names = list(rv.codec.META_NAMES) + [c.name for c in topic.schema.columns]
    for k, v in {"_offset": 1, "_type": "Returned", "_schema_version": 0, "sku": "a"}.items():
        row[names.index(k)] = v
    assert fold.fold([tuple(row)], {}) is None
    row[names.index("_schema_version")] = 1
    out = fold.fold([tuple(row)], {})
    assert out is not None and out["a"].returns == 1  # qty NULL: the field's default
