"""Rebuilds with the read models' own handlers equal the live collectors, row for row,
and hand off to them without applying an event twice or missing one."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from examples.customer.model import directory
from examples.shop.model import order_summaries, stock_levels
from reventless.spark import rebuild
from tests.spark.shoplog import Steps, append, declare, step

pytestmark = pytest.mark.spark
MODELS = [directory, order_summaries, stock_levels]


@settings(max_examples=6)
@given(st.lists(step, min_size=1, max_size=60), st.sampled_from([1, 3]))
def test_rebuild_equals_live_row_for_row(spark: Any, steps: Steps, partitions: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_parity(spark, Path(tmp), steps, partitions))


async def _parity(spark: Any, tmp: Path, steps: Steps, partitions: int) -> None:
    app = rv.App(store=f"sqlite:///{tmp / 's.db'}", options=rv.AppOptions(partitions=partitions))
    logs = declare(app)
    views = [app.collect(m) for m in MODELS]
    async with app:
        await append(logs, steps, {})
        await app.settle()
        for model, view in zip(MODELS, views, strict=True):
            live = await view.all()
            live_cps = dict(app.collector(model.name).checkpoints)
            report = await rebuild(model, app, spark=spark, workdir=tmp / "w")
            assert await view.all() == live, model.name
            assert report.rows == len(live)
            assert report.checkpoints == live_cps
            assert app.collector(model.name).checkpoints == live_cps


async def _copy_rows(url: str, model: rv.ReadModel[Any]) -> list[Any]:
    """The rows a fresh live collector builds from the whole log (a renamed copy)."""
    copy: rv.ReadModel[Any] = rv.ReadModel(f"{model.name}_copy", row=model.row, key=model.key)
    copy.handlers.update(model.handlers)
    app = rv.App(store=url)
    declare(app)
    view = app.collect(copy)
    async with app:
        await app.settle()
        return await view.all()


@pytest.mark.parametrize(
    ("paused", "store"),
    [
        (False, "sqlite"),
        (True, "sqlite"),
        pytest.param(False, "postgres", marks=pytest.mark.postgres),
        pytest.param(True, "postgres", marks=pytest.mark.postgres),
    ],
    ids=["collector-running", "collector-paused", "pg-collector-running", "pg-collector-paused"],
)
async def test_events_appended_during_the_rebuild_are_handed_off(
    spark: Any, tmp_path: Path, paused: bool, store: str, request: pytest.FixtureRequest
) -> None:
    """Counters (stock levels) break if an event is applied twice or missed."""
    if store == "postgres":  # read over JDBC, swapped in under PostgreSQL's locks
        url = str(request.getfixturevalue("pg_url"))
    else:
        url = f"sqlite:///{tmp_path / 's.db'}"
    app = rv.App(store=url)
    logs = declare(app)
    view = app.collect(stock_levels)
    from examples.shop.model import StockAdded, StockReserved

    versions: dict[str, int] = {}
    first = [(2, i % 3, StockAdded(qty=i + 1)) for i in range(300)]
    async with app:
        await append(logs, first, versions)
        await app.settle()
        if paused:
            view.pause()
        task = asyncio.create_task(rebuild(stock_levels, app, spark=spark, workdir=tmp_path / "w"))
        during = 0
        while not task.done():
            ev = StockReserved(order_id=f"o-{during}", qty=1) if during % 2 else StockAdded(qty=2)
            await append(logs, [(2, during % 3, ev)], versions)
            during += 1
            await asyncio.sleep(0.01)
        report = await task
        view.resume()
        await append(logs, [(2, 0, StockAdded(qty=5))], versions)
        await app.settle()
        assert during > 0 and report.upto["Inventory"] < 301 + during
        rebuilt = await view.all()
    assert rebuilt == await _copy_rows(url, stock_levels)
    assert (
        sum(r.available + r.reserved for r in rebuilt)
        == sum(range(1, 301)) + 2 * ((during + 1) // 2) + 5
    )


async def test_rebuild_without_a_running_app_sets_the_checkpoint(
    spark: Any, tmp_path: Path
) -> None:
    """The CLI's case: the store is opened by the rebuild; a collector started later
    continues after the rebuild's offset."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    writer = rv.App(store=url)
    logs = declare(writer)
    from examples.shop.model import StockAdded

    async with writer:
        await append(logs, [(2, i % 3, StockAdded(qty=1)) for i in range(30)], {})
    offline = rv.App(store=url)
    declare(offline)
    offline.collect(stock_levels)
    report = await rebuild(stock_levels, offline, spark=spark, workdir=tmp_path / "w")
    assert report.checkpoints == {("Inventory", 0): 30}
    app = rv.App(store=url)
    logs = declare(app)
    view = app.collect(stock_levels)
    async with app:
        await logs[2].append("sku-1", [StockAdded(qty=100)], expected_version=10)
        await app.settle()
        rows = {r.sku: r.available for r in await view.all()}
    assert rows == {"sku-1": 110, "sku-2": 10, "sku-3": 10}
