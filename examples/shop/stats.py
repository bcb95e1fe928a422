"""Shop statistics declared as column upserts: the live collector runs them as handlers,
and a Spark rebuild compiles them to one SQL aggregation (``rv.spark.rebuild``)."""

from __future__ import annotations

from pydantic import BaseModel

import reventless as rv
from examples.shop.model import OrderPlaced, StockAdded, StockReleased, StockReserved


class CustomerOrders(BaseModel):
    customer_id: str
    orders: int = 0
    units: int = 0
    last_order: str = ""
    last_sku: str = ""


customer_orders: rv.ReadModel[CustomerOrders] = rv.ReadModel(
    "customer_orders", row=CustomerOrders, key="customer_id"
)
rv.ColumnUpserts(customer_orders, key="customer_id").on(
    OrderPlaced,
    latest={"last_order": "_aggregate_id", "last_sku": "sku"},
    add={"orders": 1, "units": "qty"},
)


class StockCounters(BaseModel):
    sku: str
    added: int = 0
    reserved: int = 0
    released: int = 0
    movements: int = 0
    last_order: str = ""


stock_counters: rv.ReadModel[StockCounters] = rv.ReadModel(
    "stock_counters", row=StockCounters, key="sku"
)
_counters = rv.ColumnUpserts(stock_counters)
_counters.on(StockAdded, add={"added": "qty", "movements": 1})
_counters.on(
    StockReserved, add={"reserved": "qty", "movements": 1}, latest={"last_order": "order_id"}
)
_counters.on(
    StockReleased, add={"released": "qty", "movements": 1}, latest={"last_order": "order_id"}
)
