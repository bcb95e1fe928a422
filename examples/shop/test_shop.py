"""Tests of the shop example: specs, the saga, read models and the demo itself."""

from __future__ import annotations

from decimal import Decimal

import reventless as rv
from examples.shop.__main__ import main
from examples.shop.model import (
    AddStock,
    CancelOrder,
    ConfirmOrder,
    Inventory,
    Order,
    OrderConfirmed,
    OrderPlaced,
    PlaceOrder,
    ReservationRejected,
    ReserveStock,
    StockAdded,
    StockLevel,
    StockReserved,
    build,
    fulfilment,
    stock_levels,
)
from reventless.testing import given, given_event, given_events

PLACED = OrderPlaced(customer_id="c-1", sku="sku-1", qty=2, unit_price=Decimal("9.99"))


def test_inventory_reserves_or_rejects_as_an_event() -> None:
    given(Inventory, StockAdded(qty=3)).when(ReserveStock(order_id="o-1", qty=2)).then(
        StockReserved(order_id="o-1", qty=2)
    )
    given(Inventory, StockAdded(qty=1)).when(ReserveStock(order_id="o-1", qty=2)).then(
        ReservationRejected(order_id="o-1", qty=2, reason="out_of_stock")
    )
    given(Inventory, StockAdded(qty=3), StockReserved(order_id="o-1", qty=2)).when(
        ReserveStock(order_id="o-1", qty=2)
    ).then()  # a repeated reservation is a no-op


def test_order_lifecycle() -> None:
    given(Order).when(
        PlaceOrder(customer_id="c-1", sku="sku-1", qty=2, unit_price=Decimal("9.99"))
    ).then(PLACED)
    given(Order, PLACED).when(ConfirmOrder()).then(OrderConfirmed())
    given(Order, PLACED, OrderConfirmed()).when(ConfirmOrder()).then()
    given(Order, PLACED, OrderConfirmed()).when(CancelOrder(reason="x")).then_rejected(
        "not_pending"
    )
    given(Order, PLACED).when(PLACED_AGAIN).then_rejected("already_placed")


PLACED_AGAIN = PlaceOrder(customer_id="c-1", sku="sku-1", qty=1, unit_price=Decimal(1))


def test_saga_mapping() -> None:
    given_event(fulfilment, "o-1", PLACED).then_commands(
        rv.Send(Inventory, "sku-1", ReserveStock(order_id="o-1", qty=2))
    )
    given_event(fulfilment, "sku-1", StockReserved(order_id="o-1", qty=2)).then_commands(
        rv.Send(Order, "o-1", ConfirmOrder())
    )
    given_event(
        fulfilment, "sku-1", ReservationRejected(order_id="o-1", qty=2, reason="out_of_stock")
    ).then_commands(rv.Send(Order, "o-1", CancelOrder(reason="out_of_stock")))


def test_stock_levels() -> None:
    given_events(
        stock_levels,
        ("sku-1", StockAdded(qty=5)),
        ("sku-1", StockReserved(order_id="o-1", qty=2)),
    ).then_rows(StockLevel(sku="sku-1", available=3, reserved=2))


async def test_saga_end_to_end_with_causation(store_url: str) -> None:
    shop = build(store_url)
    async with shop.app:
        await shop.inventory.execute("sku-1", AddStock(qty=3))
        meta = rv.Metadata(user="ada", correlation_id="checkout-42")
        await shop.orders.execute(
            "o-1",
            PlaceOrder(customer_id="c-1", sku="sku-1", qty=2, unit_price=Decimal("9.99")),
            meta=meta,
        )
        await shop.orders.execute(
            "o-2", PlaceOrder(customer_id="c-1", sku="sku-1", qty=2, unit_price=Decimal(1))
        )
        await shop.app.settle()
        o1, o2 = await shop.orders.load("o-1"), await shop.orders.load("o-2")
        assert (o1.status, o2.status) == ("confirmed", "cancelled")
        assert [s.status for s in await shop.summaries.all()] == ["confirmed", "cancelled"]
        assert (await shop.summaries.get("o-1")).total == Decimal("19.98")  # type: ignore[union-attr]
        assert await shop.stock.get("sku-1") == StockLevel(sku="sku-1", available=1, reserved=2)
        assert len(shop.mailer.sent) == 1
        # the saga's events carry the correlation of the order and their cause
        placed = (await shop.orders.read())[0]
        reserved = next(e for e in await shop.inventory.read() if e.type == "StockReserved")
        confirmed = next(e for e in await shop.orders.read() if e.type == "OrderConfirmed")
        assert reserved.meta.correlation_id == "checkout-42"
        assert (
            reserved.meta.causation_id is not None
            and confirmed.meta.correlation_id == "checkout-42"
        )
        assert placed.meta.user == "ada" and reserved.meta.user == "ada"
        # redelivering the same events to the mapper changes nothing (deterministic command ids)
        heads = await shop.app.store.heads()
        mapper = shop.app.collector("order_fulfilment")
        mapper.checkpoints = dict.fromkeys(mapper.checkpoints, 0)
        for topic in mapper.topics:
            await mapper.deliver(topic, await shop.app.store.read(topic, 1, 1000))
        await shop.app.settle()
        assert await shop.app.store.heads() == heads


async def test_demo_runs_and_checks_itself(tmp_path: object) -> None:
    import pathlib

    db = pathlib.Path(str(tmp_path)) / "demo.db"
    code = await main(
        ["--store", f"sqlite:///{db}", "--orders", "400", "--customers", "40", "--skus", "5"]
    )
    assert code == 0
