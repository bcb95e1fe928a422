"""Random logs of the shop example's three aggregates (for parity properties)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

import reventless as rv
from examples.customer.model import AddressChanged, Created, Customer, Deleted, NameChanged
from examples.shop.model import (
    Inventory,
    Order,
    OrderCancelled,
    OrderConfirmed,
    OrderPlaced,
    StockAdded,
    StockReleased,
    StockReserved,
)

_name = st.sampled_from(["Ada", "Bob", "Cy", "Dee", "Émile"])
_sku = st.sampled_from(["sku-1", "sku-2", "sku-3"])
_qty = st.integers(1, 50)

customer_event = st.one_of(
    st.builds(Created, name=_name, address=st.sampled_from(["1 Main", "2 Side"])),
    st.builds(AddressChanged, address=st.sampled_from(["3 Oak", "4 Elm", "5 Pine"])),
    st.builds(NameChanged, name=_name),
    st.builds(Deleted, reason=st.just("gone")),
)
order_event = st.one_of(
    st.builds(
        OrderPlaced,
        customer_id=st.sampled_from(["c-0", "c-1", "c-2"]),
        sku=_sku,
        qty=_qty,
        unit_price=st.decimals("0.01", "99.99", places=2),
    ),
    st.just(OrderConfirmed()),
    st.builds(OrderCancelled, reason=st.just("out_of_stock")),
)
stock_event = st.one_of(
    st.builds(StockAdded, qty=_qty),
    st.builds(StockReserved, order_id=st.sampled_from(["o-0", "o-1"]), qty=_qty),
    st.builds(StockReleased, order_id=st.sampled_from(["o-0", "o-1"]), qty=_qty),
)
#: (log index, aggregate number, event)
step = st.one_of(
    st.tuples(st.just(0), st.integers(0, 4), customer_event),
    st.tuples(st.just(1), st.integers(0, 4), order_event),
    st.tuples(st.just(2), st.integers(0, 2), stock_event),
)
PREFIX = ("c", "o", "sku-")
Steps = list[tuple[int, int, Any]]


def declare(app: rv.App) -> list[rv.EventLog[Any]]:
    """The shop's three logs in ``app``."""
    return [app.event_log(Customer), app.event_log(Order), app.event_log(Inventory)]


async def append(logs: list[rv.EventLog[Any]], steps: Steps, versions: dict[str, int]) -> None:
    """Append each step's event to its aggregate (any order of events is allowed)."""
    for which, n, event in steps:
        aid = f"{PREFIX[which]}-{n}" if which < 2 else f"sku-{n + 1}"
        v = versions.get(aid, 0)
        await logs[which].append(aid, [event], expected_version=v)
        versions[aid] = v + 1


def decimal_total(qty: int, price: Decimal) -> Decimal:
    return price * qty
