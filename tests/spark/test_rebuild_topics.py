"""A read model over two topics rebuilds equal to the live collector: events of both
topics meet in one group per key (one key from a key function, one from the aggregate id)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reventless as rv
from examples.shop.model import OrderPlaced, StockAdded, StockReserved
from reventless.spark import rebuild
from tests.spark.shoplog import declare

pytestmark = pytest.mark.spark


class SkuActivity(BaseModel):
    sku: str
    ordered: int = 0
    added: int = 0
    orders: int = 0


activity: rv.ReadModel[SkuActivity] = rv.ReadModel("sku_activity", row=SkuActivity, key="sku")


@activity.on(OrderPlaced, key=lambda ev: ev.event.sku)
def _ordered(ev: rv.Envelope[OrderPlaced], current: SkuActivity | None) -> rv.Upsert[SkuActivity]:
    row = current or SkuActivity(sku=ev.event.sku)
    return rv.Upsert(
        row.model_copy(update={"ordered": row.ordered + ev.event.qty, "orders": row.orders + 1})
    )


@activity.on(StockAdded)
def _added(ev: rv.Envelope[StockAdded], current: SkuActivity | None) -> rv.Upsert[SkuActivity]:
    assert ev.aggregate_id is not None
    row = current or SkuActivity(sku=ev.aggregate_id)
    return rv.Upsert(row.model_copy(update={"added": row.added + ev.event.qty}))


async def test_a_read_model_over_two_topics_rebuilds_equal_to_live(
    spark: Any, tmp_path: Path
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    _, orders, stock = declare(app)
    view = app.collect(activity)
    async with app:
        for i in range(30):
            sku = f"sku-{i % 4}"
            await stock.append(sku, [StockAdded(qty=i + 1)], expected_version=i // 4)
            placed = OrderPlaced(customer_id="c-1", sku=sku, qty=i % 3 + 1, unit_price=Decimal(1))
            await orders.append(f"o-{i}", [placed], expected_version=0)
        await stock.append("sku-0", [StockReserved(order_id="o-0", qty=1)], expected_version=8)
        await app.settle()
        live = await view.all()
        report = await rebuild(activity, app, spark=spark, workdir=tmp_path / "w")
        assert report.path == "python"
        assert report.events_applied == 60  # the reservation has no handler
        assert await view.all() == live
        assert len(live) == 4 and sum(r.orders for r in live) == 30
