"""Time travel: a read model's state as of an offset or a time, next to the live table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from examples.shop.model import StockAdded, stock_levels
from examples.shop.stats import stock_counters
from reventless.spark import rebuild
from reventless.store.readmodel import SqlReadModelTable as ReadModelTable
from tests.spark.shoplog import append, declare

pytestmark = pytest.mark.spark


async def _rows(app: rv.App, model: rv.ReadModel[Any], table: str) -> list[Any]:
    return await ReadModelTable(model, app.store.db, table=table).all()


@pytest.mark.parametrize("model", [stock_levels, stock_counters], ids=["python", "vectorised"])
async def test_state_as_of_an_offset_and_a_time(
    spark: Any, tmp_path: Path, model: rv.ReadModel[Any]
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    logs = declare(app)
    view = app.collect(model)
    versions: dict[str, int] = {}
    async with app:
        await append(logs, [(2, i % 2, StockAdded(qty=1)) for i in range(10)], versions)
        await app.settle()
        then = await view.all()
        cut = datetime.now(UTC)
        await append(logs, [(2, i % 3, StockAdded(qty=10)) for i in range(6)], versions)
        await app.settle()
        now = await view.all()
        by_offset = await rebuild(model, app, spark=spark, workdir=tmp_path / "w", as_of=10)
        assert by_offset.table == f"rm_{model.name}__asof_10" and by_offset.checkpoints == {}
        assert await _rows(app, model, by_offset.table) == then
        by_time = await rebuild(model, app, spark=spark, workdir=tmp_path / "w", as_of=cut)
        assert by_time.upto == {"Inventory": 10}
        assert await _rows(app, model, by_time.table) == then
        assert await view.all() == now  # the live table is untouched
