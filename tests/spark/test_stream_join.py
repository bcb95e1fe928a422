"""A streaming projection that joins topics: orders (the stream) with the customers'
names (another topic, read as a batch for each micro-batch), counted per name."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

import reventless as rv
from examples.customer.model import Created
from examples.shop.model import OrderPlaced
from reventless.spark.streamrun import start_stream
from tests.spark.shoplog import declare
from tests.spark.streamlog import rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from reventless.spark.stream import Topics

pytestmark = pytest.mark.spark


class NameOrders(BaseModel):
    id: str  # the customer's name
    orders: int


per_name: rv.ReadModel[NameOrders] = rv.ReadModel("orders_per_name", row=NameOrders, key="id")


def orders_per_name(topics: Topics) -> DataFrame:
    from pyspark.sql import functions as F

    orders = topics["Order"].where(F.col("_type") == OrderPlaced.event_type)
    names = (
        topics.static("Customer")
        .where(F.col("_type") == Created.event_type)
        .select(F.col("_aggregate_id").alias("customer_id"), F.col("name"))
    )
    return (
        orders.join(names, "customer_id")
        .groupBy("name")
        .agg(F.count("*").alias("orders"))
        .select(F.col("name").alias("id"), F.col("orders").cast("long").alias("orders"))
    )


def placed(customer: str) -> OrderPlaced:
    return OrderPlaced(customer_id=customer, sku="sku-1", qty=1, unit_price=Decimal("1.00"))


async def test_a_stream_joins_another_topic_read_up_to_each_micro_batch(
    spark: Any, tmp_path: Path
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    customers, orders, _ = declare(app)
    async with app:
        for cid, name in (("c-0", "Ada"), ("c-1", "Bob")):
            await customers.append(cid, [Created(name=name, address="1 Main")], expected_version=0)
        for i, cid in enumerate(["c-0", "c-0", "c-1", "c-0", "c-1"]):
            await orders.append(f"o-{i}", [placed(cid)], expected_version=0)
        running = start_stream(
            per_name, app, orders_per_name, spark=spark, checkpoint=tmp_path / "ck",
            trigger="200ms",
        )  # fmt: skip
        try:
            running.wait_for_positions(await app.store.partition_heads(["Order"]))  # type: ignore[attr-defined]
            # a customer registered after the stream started is joined by later batches
            await customers.append(
                "c-2", [Created(name="Cy", address="2 Side")], expected_version=0
            )
            await orders.append("o-9", [placed("c-2")], expected_version=0)
            running.wait_for_positions(await app.store.partition_heads(["Order"]))  # type: ignore[attr-defined]
        finally:
            running.stop()
        got = sorted((r.id, r.orders) for r in await rows(app, per_name))
    assert got == [("Ada", 3), ("Bob", 2), ("Cy", 1)]
