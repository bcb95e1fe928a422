"""An online shop: orders, inventory, an order -> stock-reservation saga, read models
and a confirmation side effect. Customers come from ``examples.customer``."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from pydantic import BaseModel, Field

import reventless as rv
from examples.customer.model import Customer, CustomerRow, directory

# -- inventory -----------------------------------------------------------------------------


class StockAdded(rv.Event):
    qty: int


class StockReserved(rv.Event):
    order_id: str
    qty: int


class ReservationRejected(rv.Event):
    order_id: str
    qty: int
    reason: str


class StockReleased(rv.Event):
    order_id: str
    qty: int


class AddStock(rv.Command):
    qty: int = Field(gt=0)


class ReserveStock(rv.Command):
    order_id: str
    qty: int = Field(gt=0)


class ReleaseStock(rv.Command):
    order_id: str


class Inventory(rv.Aggregate):
    """Stock of one SKU. A reservation that cannot be met is an event, not an error:
    the saga reacts to it."""

    events = StockAdded | StockReserved | ReservationRejected | StockReleased
    available: int = 0
    reservations: dict[str, int] = {}

    @rv.handles(AddStock)
    def add(self, cmd: AddStock) -> StockAdded:
        return StockAdded(qty=cmd.qty)

    @rv.handles(ReserveStock)
    def reserve(self, cmd: ReserveStock) -> StockReserved | ReservationRejected | None:
        if cmd.order_id in self.reservations:
            return None  # already reserved: idempotent
        if cmd.qty > self.available:
            return ReservationRejected(order_id=cmd.order_id, qty=cmd.qty, reason="out_of_stock")
        return StockReserved(order_id=cmd.order_id, qty=cmd.qty)

    @rv.handles(ReleaseStock)
    def release(self, cmd: ReleaseStock) -> StockReleased | None:
        qty = self.reservations.get(cmd.order_id)
        return None if qty is None else StockReleased(order_id=cmd.order_id, qty=qty)

    @rv.applies(StockAdded)
    def _added(self, e: StockAdded) -> None:
        self.available += e.qty

    @rv.applies(StockReserved)
    def _reserved(self, e: StockReserved) -> None:
        self.available -= e.qty
        self.reservations[e.order_id] = e.qty

    @rv.applies(ReservationRejected)
    def _rejected(self, e: ReservationRejected) -> None:
        pass

    @rv.applies(StockReleased)
    def _released(self, e: StockReleased) -> None:
        self.available += e.qty
        self.reservations.pop(e.order_id, None)


# -- orders --------------------------------------------------------------------------------


class OrderPlaced(rv.Event):
    customer_id: str
    sku: str
    qty: int
    unit_price: Decimal


class OrderConfirmed(rv.Event):
    pass


class OrderCancelled(rv.Event):
    reason: str


class PlaceOrder(rv.Command):
    customer_id: str
    sku: str
    qty: int = Field(gt=0)
    unit_price: Decimal = Field(ge=0)


class ConfirmOrder(rv.Command):
    pass


class CancelOrder(rv.Command):
    reason: str


class Order(rv.Aggregate):
    """An order of one SKU; the saga confirms or cancels it."""

    events = OrderPlaced | OrderConfirmed | OrderCancelled
    customer_id: str = ""
    sku: str = ""
    qty: int = 0
    status: str = "new"

    @rv.handles(PlaceOrder)
    def place(self, cmd: PlaceOrder) -> OrderPlaced:
        if self.version:
            raise rv.Rejected("already_placed", f"order {self.id} exists")
        return OrderPlaced(
            customer_id=cmd.customer_id, sku=cmd.sku, qty=cmd.qty, unit_price=cmd.unit_price
        )

    @rv.handles(ConfirmOrder)
    def confirm(self, cmd: ConfirmOrder) -> OrderConfirmed | None:
        if self.status == "confirmed":
            return None
        if self.status != "placed":
            raise rv.Rejected("not_pending", f"order {self.id} is {self.status}")
        return OrderConfirmed()

    @rv.handles(CancelOrder)
    def cancel(self, cmd: CancelOrder) -> OrderCancelled | None:
        if self.status == "cancelled":
            return None
        if self.status != "placed":
            raise rv.Rejected("not_pending", f"order {self.id} is {self.status}")
        return OrderCancelled(reason=cmd.reason)

    @rv.applies(OrderPlaced)
    def _placed(self, e: OrderPlaced) -> None:
        self.customer_id, self.sku, self.qty, self.status = e.customer_id, e.sku, e.qty, "placed"

    @rv.applies(OrderConfirmed)
    def _confirmed(self, e: OrderConfirmed) -> None:
        self.status = "confirmed"

    @rv.applies(OrderCancelled)
    def _cancelled(self, e: OrderCancelled) -> None:
        self.status = "cancelled"


# -- the saga ------------------------------------------------------------------------------

fulfilment = rv.EventMapper("order_fulfilment")


@fulfilment.on(OrderPlaced)
def _reserve(ev: rv.Envelope[OrderPlaced]) -> rv.Send:
    assert ev.aggregate_id is not None
    return rv.Send(
        Inventory, ev.event.sku, ReserveStock(order_id=ev.aggregate_id, qty=ev.event.qty)
    )


@fulfilment.on(StockReserved)
def _confirm(ev: rv.Envelope[StockReserved]) -> rv.Send:
    return rv.Send(Order, ev.event.order_id, ConfirmOrder())


@fulfilment.on(ReservationRejected)
def _cancel(ev: rv.Envelope[ReservationRejected]) -> rv.Send:
    return rv.Send(Order, ev.event.order_id, CancelOrder(reason=ev.event.reason))


# -- read models ---------------------------------------------------------------------------


class OrderSummary(BaseModel):
    order_id: str
    customer_id: str
    sku: str
    qty: int
    total: Decimal
    status: str


order_summaries: rv.ReadModel[OrderSummary] = rv.ReadModel(
    "order_summaries", row=OrderSummary, key="order_id"
)


@order_summaries.on(OrderPlaced)
def _summary_placed(ev: rv.Envelope[OrderPlaced]) -> rv.Upsert[OrderSummary]:
    e = ev.event
    assert ev.aggregate_id is not None
    return rv.Upsert(
        OrderSummary(
            order_id=ev.aggregate_id,
            customer_id=e.customer_id,
            sku=e.sku,
            qty=e.qty,
            total=e.unit_price * e.qty,
            status="placed",
        )
    )


@order_summaries.on(OrderConfirmed, OrderCancelled)
def _summary_status(
    ev: rv.Envelope[OrderConfirmed | OrderCancelled], current: OrderSummary | None
) -> rv.Upsert[OrderSummary] | None:
    if current is None:
        return None
    status = "confirmed" if isinstance(ev.event, OrderConfirmed) else "cancelled"
    return rv.Upsert(current.model_copy(update={"status": status}))


class StockLevel(BaseModel):
    sku: str
    available: int
    reserved: int


stock_levels: rv.ReadModel[StockLevel] = rv.ReadModel("stock_levels", row=StockLevel, key="sku")


@stock_levels.on(StockAdded, StockReserved, StockReleased)
def _stock(
    ev: rv.Envelope[StockAdded | StockReserved | StockReleased], current: StockLevel | None
) -> rv.Upsert[StockLevel]:
    assert ev.aggregate_id is not None
    row = current or StockLevel(sku=ev.aggregate_id, available=0, reserved=0)
    e = ev.event
    if isinstance(e, StockAdded):
        row = row.model_copy(update={"available": row.available + e.qty})
    elif isinstance(e, StockReserved):
        row = row.model_copy(
            update={"available": row.available - e.qty, "reserved": row.reserved + e.qty}
        )
    else:
        row = row.model_copy(
            update={"available": row.available + e.qty, "reserved": row.reserved - e.qty}
        )
    return rv.Upsert(row)


# -- side effect ---------------------------------------------------------------------------


class Mailer:
    """Stands in for an email API that deduplicates on an idempotency key."""

    def __init__(self) -> None:
        self.sent: dict[str, str] = {}
        self.calls = 0

    def send(self, idempotency_key: str, to: str, body: str) -> None:
        self.calls += 1
        self.sent.setdefault(idempotency_key, f"{to}: {body}")


def confirmations(mailer: Mailer) -> rv.SideEffectHandler:
    """The confirmation-email side effect, bound to a mailer."""
    effect = rv.SideEffectHandler("order_confirmations", max_attempts=3, backoff=0.01)

    @effect.on(OrderConfirmed)
    def _mail(ev: rv.Envelope[OrderConfirmed]) -> None:
        mailer.send(
            effect.idempotency_key(ev), f"order {ev.aggregate_id}", "your order is confirmed"
        )

    return effect


@dataclass
class Shop:
    """The wired shop: the App, its logs and its read-model projections."""

    app: rv.App
    customers: rv.EventLog[Customer]
    orders: rv.EventLog[Order]
    inventory: rv.EventLog[Inventory]
    summaries: rv.Projection[OrderSummary]
    stock: rv.Projection[StockLevel]
    directory: rv.Projection[CustomerRow]
    mailer: Mailer


def build(store: str, broker: str = "memory://", *, options: rv.AppOptions | None = None) -> Shop:
    """Wire the shop: logs, saga, read models and the confirmation side effect."""
    app = rv.App(store=store, broker=broker, service="shop", options=options)
    mailer = Mailer()
    shop = Shop(
        app=app,
        customers=app.event_log(Customer),
        orders=app.event_log(Order),
        inventory=app.event_log(Inventory),
        summaries=app.collect(order_summaries),
        stock=app.collect(stock_levels),
        directory=app.collect(directory),
        mailer=mailer,
    )
    app.collect(fulfilment)
    app.collect(confirmations(mailer))
    return shop


DEMO_STORE = "sqlite:///.demo/shop.db"


def app(store: str = DEMO_STORE) -> rv.App:
    """The shop's App, for the ``reventless`` command's ``--app examples.shop.model:app``
    (which passes ``--store URL`` as ``store``; the default is ``make demo``'s store)."""
    return build(store).app
