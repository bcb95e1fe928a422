"""``where=`` predicates on in-process collectors: pushdown in catch-up reads (SQL) and on
live broker batches (Arrow), checkpoints that move past filtered-out events, the broker
channel narrowed to the allowed types, and bad or hostile predicates refused at build time
with nothing created. On SQLite and PostgreSQL (``db_url``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

import reventless as rv
from reventless.cli import main
from reventless.collect.where import compile_where
from reventless.subscribe import PredicateError, ResnapshotRequiredError, Retention
from reventless.synth import channels_of


class OrderPlaced(rv.Event):
    total: float
    sku: str
    note: str | None = None


class OrderCancelled(rv.Event):
    reason: str


class Place(rv.Command):
    total: float


class Order(rv.Aggregate):
    events = OrderPlaced | OrderCancelled

    @rv.handles(Place)
    def place(self, cmd: Place) -> OrderPlaced:
        return OrderPlaced(total=cmd.total, sku="s")

    @rv.applies(OrderPlaced)
    def _placed(self, e: OrderPlaced) -> None:
        pass

    @rv.applies(OrderCancelled)
    def _cancelled(self, e: OrderCancelled) -> None:
        pass


class Seen(BaseModel):
    id: str
    offset: int


@dataclass(frozen=True)
class Fact:
    """What the oracle knows of an appended event."""

    offset: int
    key: str
    version: int
    type: str
    total: float | None
    sku: str | None
    note: str | None
    reason: str | None


def _gt(a: Any, b: Any) -> bool | None:
    return None if a is None else a > b


#: (predicate, the same question asked in plain Python; None = SQL's unknown = dropped)
CASES: list[tuple[str, Callable[[Fact], bool | None]]] = [
    (
        "type = 'OrderPlaced' AND total > 100",
        lambda f: f.type == "OrderPlaced" and _gt(f.total, 100),
    ),
    ("key LIKE 'a-1%'", lambda f: f.key.startswith("a-1")),
    (
        "type IN ('OrderCancelled') OR total <= 20",
        lambda f: f.type == "OrderCancelled" or (f.total is not None and f.total <= 20),
    ),
    ("NOT (total > 50)", lambda f: None if f.total is None else not f.total > 50),
    ("note IS NULL AND type = 'OrderPlaced'", lambda f: f.note is None and f.type == "OrderPlaced"),
    (
        "version BETWEEN 2 AND 3 AND reason <> 'late'",
        lambda f: 2 <= f.version <= 3 and f.reason == "changed",
    ),
    ("sku = 'x''; DROP TABLE rv_checkpoints; --'", lambda f: False),  # a value, never SQL
    ("total > 1e9", lambda f: False),  # nothing matches: checkpoints still reach the head
    (
        "sku IN ('s1', 's3') AND note LIKE 'n_%'",
        lambda f: f.sku in ("s1", "s3") and f.note is not None,
    ),
]


def _events(start: int, n: int) -> list[tuple[str, rv.Event]]:
    out: list[tuple[str, rv.Event]] = []
    for i in range(start, start + n):
        key = f"a-{i % 13}"
        if i % 4 == 3:
            out.append((key, OrderCancelled(reason="late" if i % 8 == 3 else "changed")))
        else:
            note = None if i % 3 == 0 else f"n{i}"
            out.append((key, OrderPlaced(total=(i * 37) % 200 + 0.5, sku=f"s{i % 5}", note=note)))
    return out


async def _append(
    log: rv.EventLog[Order], events: list[tuple[str, rv.Event]], versions: dict[str, int]
) -> list[Fact]:
    facts = []
    for key, ev in events:
        res = await log.append(key, [ev], expected_version=versions.get(key, 0))
        versions[key] = versions.get(key, 0) + 1
        facts.append(
            Fact(
                offset=res.last_offset,
                key=key,
                version=versions[key],
                type=type(ev).__name__,
                total=ev.total if isinstance(ev, OrderPlaced) else None,
                sku=ev.sku if isinstance(ev, OrderPlaced) else None,
                note=ev.note if isinstance(ev, OrderPlaced) else None,
                reason=ev.reason if isinstance(ev, OrderCancelled) else None,
            )
        )
    return facts


def _model(n: int, where: str | None) -> rv.ReadModel[Seen]:
    m = rv.ReadModel(f"seen_{n}", row=Seen, key="id", where=where)

    @m.on(OrderPlaced, OrderCancelled)
    def _(ev: rv.Envelope[Any]) -> rv.Upsert[Seen]:
        return rv.Upsert(Seen(id=str(ev.offset), offset=ev.offset))

    return m


def _app(
    url: str, partitions: int, *, models: bool
) -> tuple[rv.App, rv.EventLog[Order], list[rv.Projection[Seen]]]:
    app = rv.App(store=url, options=rv.AppOptions(partitions=partitions))
    log = app.event_log(Order)
    projections = (
        [app.collect(_model(n, text)) for n, (text, _) in enumerate(CASES)] if models else []
    )
    return app, log, projections


@pytest.mark.parametrize("partitions", [1, 3])
async def test_read_models_get_exactly_the_matching_events_in_catch_up_and_live(
    db_url: str, partitions: int
) -> None:
    versions: dict[str, int] = {}
    writer, wlog, _ = _app(db_url, partitions, models=False)
    async with writer:  # catch-up: these are in the store before any collector exists
        facts = await _append(wlog, _events(0, 60), versions)
    app, log, projections = _app(db_url, partitions, models=True)
    async with app:
        await app.settle()
        for (text, oracle), proj in zip(CASES, projections, strict=True):
            got = sorted(r.offset for r in await proj.all())
            assert got == [f.offset for f in facts if oracle(f) is True], text
        # live: appended while the collectors run, delivered through the broker
        facts += await _append(log, _events(60, 60), versions)
        await app.settle()
        head = await app.store.head("Order")
        for (text, oracle), proj in zip(CASES, projections, strict=True):
            got = sorted(r.offset for r in await proj.all())
            assert got == [f.offset for f in facts if oracle(f) is True], text
            # filtered-out events moved the checkpoint too: no lag, no gap stall
            assert await proj.lag() == {"Order": 0}, text
            assert max(proj.collector.checkpoints.values()) == head
        checkpoints = await app.store.db.read(
            lambda c: c.exec_driver_sql("SELECT COUNT(*) FROM rv_checkpoints").scalar()
        )
        assert checkpoints == len(CASES) * partitions  # the "DROP TABLE" value dropped nothing


async def test_live_batches_are_filtered_with_the_arrow_expression(db_url: str) -> None:
    app, log, _ = _app(db_url, 1, models=False)
    async with app:
        facts = await _append(log, _events(0, 50), {})
        rows = await app.store.read("Order", 1, 1000)
        batch = log.definition.schema.to_arrow(rows)
        for n, (text, oracle) in enumerate(CASES):
            (f,) = compile_where(_model(n, text), {"Order": log.definition}).values()
            got = f.table(batch).column("_offset").to_pylist()
            assert got == [x.offset for x in facts if oracle(x) is True], text
            assert [r[0] for r in f.rows(rows)] == got, text  # the Python row filter agrees


@pytest.mark.parametrize(
    "where",
    [
        "total >",
        "nope = 1",
        "sku > 3",
        "total > 1; DROP TABLE rv_topics",
        "1=1) OR (1=1",
        "sku = 'a' UNION SELECT * FROM rv_topics",
        "total > (SELECT 1)",
        "sku = 'a' OR 1 = 1",
    ],
)
async def test_bad_or_hostile_predicates_fail_the_build_and_nothing_lands(
    db_url: str, where: str
) -> None:
    app, _, _ = _app(db_url, 1, models=False)
    app.collect(_model(0, where))
    with pytest.raises(PredicateError, match="seen_0"):
        async with app:
            pytest.fail("the App must not start")
    engine = sa.create_engine(db_url)
    try:
        assert sa.inspect(engine).get_table_names() == []  # no topic, no read model, nothing
    finally:
        engine.dispose()


def test_where_must_be_text() -> None:
    with pytest.raises(rv.SpecError, match="predicate string"):
        rv.SideEffectHandler("x", where=42)  # type: ignore[arg-type]


def test_the_broker_channel_narrows_to_the_types_the_predicate_allows() -> None:
    app = rv.App(store="sqlite://")
    app.event_log(Order)
    placed = app.collect(_model(0, "type = 'OrderPlaced' AND total > 100"))
    app.collect(_model(1, "total > 100"))  # does not restrict the type
    app.collect(_model(2, "type IN ('OrderPlaced', 'Gone')"))
    reads = {c.group: c.topics["Order"] for c in channels_of(app).collectors}
    one, both = frozenset({"OrderPlaced"}), frozenset({"OrderPlaced", "OrderCancelled"})
    assert reads == {"seen_0": one, "seen_1": both, "seen_2": one}
    from reventless_aws.cloudformation import filter_policy

    all_types = frozenset({"OrderPlaced", "OrderCancelled"})
    assert filter_policy(reads[placed.name], all_types) == {"rv-types": ["OrderPlaced"]}
    assert filter_policy(reads["seen_1"], all_types) is None


async def test_a_collector_behind_the_retained_horizon_stops_in_resnapshot_required(
    db_url: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    versions: dict[str, int] = {}
    app = rv.App(store=db_url)
    log = app.event_log(Order)
    seen = app.collect(_model(0, None))
    async with app:
        await _append(log, _events(0, 10), versions)
        await app.settle()
        assert await seen.count() == 10
    # the collector is stopped while the log moves on and retention deletes events
    writer = rv.App(store=db_url)
    wlog = writer.event_log(Order)
    async with writer:
        await _append(wlog, _events(10, 10), versions)
        retention = Retention(writer.store.db)
        await retention.open()
        await retention.set("Order", max_count=5)
        assert await retention.apply() == {"Order": 15}  # offsets 1..15 are gone
    app = rv.App(store=db_url)
    log = app.event_log(Order)
    seen = app.collect(_model(0, None))
    with caplog.at_level(logging.ERROR, logger="reventless.collect"):
        async with app:
            assert seen.state == "resnapshot_required"
            assert seen.resnapshot_required == {("Order", 0): 15}
            assert any("resnapshot required" in r.getMessage() for r in caplog.records)
            # nothing after the checkpoint was applied: 11..15 were not silently skipped
            assert await seen.count() == 10
            assert seen.collector.checkpoints == {("Order", 0): 10}
            assert await seen.lag() == {"Order": 10}
            with pytest.raises(ResnapshotRequiredError) as err:
                await seen.wait_caught_up(timeout=5)
            assert (err.value.horizon, err.value.cursor) == (15, 11)
            with pytest.raises(ResnapshotRequiredError):
                await app.settle(timeout=5)
            # live events of the stopped partition wait too
            await _append(log, _events(20, 1), versions)
            await asyncio.sleep(0.3)
            assert await seen.count() == 10 and await seen.lag() == {"Order": 11}
            stored = await app.store.db.read(
                lambda c: c.exec_driver_sql('SELECT "offset" FROM rv_checkpoints').scalar()
            )
            assert stored == 10
            # the CLI shows it (reads the store like an operator would)
            assert await asyncio.to_thread(main, ["topics", "--store", db_url]) == 0
            assert "resnapshot_required" in capsys.readouterr().out
            # after rebuilding (here: accepting the loss) it continues from the horizon
            await seen.accept_resnapshot()
            await app.settle()
            assert seen.state == "running" and seen.resnapshot_required == {}
            assert sorted(r.offset for r in await seen.all()) == [*range(1, 11), *range(16, 22)]
            assert await seen.lag() == {"Order": 0}
    assert await asyncio.to_thread(main, ["topics", "--store", db_url]) == 0
    assert "resnapshot_required" not in capsys.readouterr().out


async def test_side_effects_and_mappers_see_only_matching_events(db_url: str) -> None:
    calls: list[int] = []
    audit = rv.SideEffectHandler("audit", where="type = 'OrderCancelled' AND reason = 'late'")

    @audit.on(OrderPlaced, OrderCancelled)
    async def _(ev: rv.Envelope[Any]) -> None:
        calls.append(ev.offset)

    app = rv.App(store=db_url)
    log = app.event_log(Order)
    handle = app.collect(audit)
    async with app:
        facts = await _append(log, _events(0, 40), {})
        await app.settle()
        assert await handle.lag() == {"Order": 0}
    assert sorted(calls) == [
        f.offset for f in facts if f.type == "OrderCancelled" and f.reason == "late"
    ]
