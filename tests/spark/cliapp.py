"""An App factory for the CLI tests: the shop's logs and two read models."""

from __future__ import annotations

import reventless as rv
from examples.shop.model import stock_levels
from examples.shop.stats import customer_orders
from tests.spark.shoplog import declare


def app(store: str = "sqlite:///shop.db") -> rv.App:
    """The shop's logs with the stock levels and customer orders read models."""
    a = rv.App(store=store)
    declare(a)
    a.collect(stock_levels)
    a.collect(customer_orders)
    return a
