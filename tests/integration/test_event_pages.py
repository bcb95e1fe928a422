"""Per-event handlers catch up from Arrow pages where the store reads them in other
processes (a SQLite file's helpers: ``Store.arrow_rows``), and get exactly the envelopes
that a read of the log as rows gives: every field type, metadata, tags and trace."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.store import arrowhelper
from tests.arrow_pages import counting


class Size(enum.StrEnum):
    S = "s"
    L = "l"


class Dims(BaseModel):
    w: float
    h: int | None = None


class Shipped(rv.Event):
    qty: int
    price: float
    gift: bool
    note: str | None = None
    at: dt.datetime
    size: Size
    dims: Dims
    lines: list[str]
    extra: dict[str, int]
    sku: Annotated[str, rv.Tag("sku")]


class Cancelled(rv.Event):
    reason: str


class Ship(rv.Command):
    k: int


class Cancel(rv.Command):
    pass


class Parcel(rv.Aggregate):
    events = Shipped | Cancelled

    @rv.handles(Ship)
    def ship(self, cmd: Ship) -> Shipped:
        k = cmd.k
        return Shipped(
            qty=k,
            price=k / 4,
            gift=k % 2 == 0,
            note=None if k % 3 else f"n{k}",
            at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=k),
            size=Size.S if k % 2 else Size.L,
            dims=Dims(w=k / 8, h=None if k % 5 else k),
            lines=[f"l{i}" for i in range(k % 3)],
            extra={"k": k} if k % 4 else {},
            sku=f"sku-{k % 7}",
        )

    @rv.handles(Cancel)
    def cancel(self, cmd: Cancel) -> Cancelled:
        return Cancelled(reason="late")

    @rv.applies(Shipped)
    def _shipped(self, e: Shipped) -> None:
        pass

    @rv.applies(Cancelled)
    def _cancelled(self, e: Cancelled) -> None:
        pass


N = 900


async def test_a_per_event_catch_up_reads_arrow_pages_and_gets_the_logs_envelopes(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Parcel)
    async with app:
        for k in range(N):
            meta = rv.Metadata(user=f"u{k % 3}" if k % 2 else None, tenant=None)
            await log.execute(f"p-{k % 40}", Ship(k=k), meta=meta)
            if k % 100 == 0:
                await log.execute(f"p-{k % 40}", Cancel())
        expected = await log.read(1, 10_000)
    assert len(expected) == N + 9

    # a fresh App catches up with a per-event side effect, its pages read by helpers
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 1)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 1)
    pages = counting(monkeypatch)
    got: list[rv.Envelope[Any]] = []
    effect = rv.SideEffectHandler("seen")

    @effect.on(Shipped, Cancelled)
    async def _seen(ev: rv.Envelope[Any]) -> None:
        got.append(ev)

    cancels: list[rv.Envelope[Any]] = []
    only = rv.SideEffectHandler("cancels")  # one type: the others are left in Arrow

    @only.on(Cancelled)
    def _cancel(ev: rv.Envelope[Any]) -> None:
        cancels.append(ev)

    app = rv.App(
        store=file_url,
        options=rv.AppOptions(collector=rv.CollectorOptions(page_size=200)),
    )
    app.event_log(Parcel)
    app.collect(effect)
    app.collect(only)
    async with app:
        assert app.store.arrow_rows
        await app.settle()
    assert -1 not in pages and sum(pages) == 2 * len(expected), pages  # all as Arrow
    assert sorted(got, key=lambda e: e.offset) == expected
    assert cancels == [e for e in expected if e.type == "Cancelled"] and len(cancels) == 9
    by_offset = {e.offset: e for e in got}
    for e in expected:  # the same values, of the same types (not just equal ones)
        mine = by_offset[e.offset]
        assert type(mine.event) is type(e.event)
        assert mine.event.model_dump() == e.event.model_dump()
        assert [type(v) for v in mine] == [type(v) for v in e]
    # per aggregate, in version order
    for agg in {e.aggregate_id for e in got}:
        versions = [e.version for e in got if e.aggregate_id == agg]
        assert versions == sorted(versions)


async def test_per_event_handlers_read_arrow_pages_where_helpers_read_them(
    any_url: str,
) -> None:
    """Only where other processes read the Arrow pages are they cheaper than rows: the
    helpers of a SQLite file and of PostgreSQL; not SQLite in memory (no helpers)."""
    app = rv.App(store=any_url)
    app.event_log(Parcel)
    async with app:
        assert app.store.arrow_rows is (any_url != "sqlite://")


async def test_live_delivery_turns_only_the_handled_types_into_rows(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector taking one event type of a topic drops the other types from the
    broker's Arrow batches before they become rows; its checkpoint still passes them."""
    from reventless.codec.schema import TopicSchema

    converted: list[str] = []
    to_rows = TopicSchema.from_arrow_rows

    def spy(self: TopicSchema, table: Any, **kw: Any) -> Any:
        converted.extend(table.column("_type").to_pylist())
        return to_rows(self, table, **kw)

    cancels: list[rv.Envelope[Any]] = []
    only = rv.SideEffectHandler("cancels")

    @only.on(Cancelled)
    def _cancel(ev: rv.Envelope[Any]) -> None:
        cancels.append(ev)

    app = rv.App(store=file_url)
    log = app.event_log(Parcel)
    app.collect(only)
    async with app:
        monkeypatch.setattr(TopicSchema, "from_arrow_rows", spy)
        for k in range(60):
            await log.execute(f"p-{k % 7}", Cancel() if k % 10 == 0 else Ship(k=k))
        await app.settle()
        monkeypatch.undo()
        expected = [e for e in await log.read(1, 1_000) if e.type == "Cancelled"]
        head = await app.store.head(log.name)
        status = dict(app.collector("cancels").checkpoints)
    assert cancels == expected and len(expected) == 6
    assert converted and set(converted) == {"Cancelled"}, converted  # delivered live
    assert max(status.values()) == head == 60
