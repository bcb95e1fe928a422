import asyncio
from datetime import UTC, datetime, timedelta

import reventless as rv


class Placed(rv.Event):
    total: int


class Paid(rv.Event):
    pass


class Expired(rv.Event):
    pass


class Place(rv.Command):
    total: int


class Pay(rv.Command):
    pass


class Expire(rv.Command):
    pass


class Order(rv.Aggregate):
    events = Placed | Paid | Expired
    status: str = "new"

    @rv.handles(Place)
    def place(self, cmd: Place) -> list[rv.Event | rv.Schedule]:
        # stored in the same transaction as the event: both land, or neither
        expire = rv.Schedule(
            Order, self.id, Expire(), after=timedelta(minutes=30), id=f"expire:{self.id}"
        )
        return [Placed(total=cmd.total), expire]

    @rv.handles(Pay)
    def pay(self, cmd: Pay) -> list[rv.Event | rv.CancelSchedule]:
        return [Paid(), rv.CancelSchedule(f"expire:{self.id}")]

    @rv.handles(Expire)
    def expire(self, cmd: Expire) -> Expired:
        if self.status != "placed":
            raise rv.Rejected("not_open", f"order {self.id} is {self.status}")
        return Expired()

    @rv.applies(Placed)
    def _placed(self, e: Placed) -> None:
        self.status = "placed"

    @rv.applies(Paid)
    def _paid(self, e: Paid) -> None:
        self.status = "paid"

    @rv.applies(Expired)
    def _expired(self, e: Expired) -> None:
        self.status = "expired"


async def main() -> None:
    # a clock that moves only when told; leave it out for the wall clock
    clock = rv.ManualClock(datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    app = rv.App(store="sqlite:///orders.db", options=rv.AppOptions(clock=clock))
    orders = app.event_log(Order)
    async with app:
        await orders.execute("o-1", Place(total=30))
        await orders.execute("o-2", Place(total=12))
        await orders.execute("o-2", Pay())  # cancels expire:o-2
        print("pending:", [s.id for s in await app.scheduler.pending()])
        fired = await app.scheduler.advance(timedelta(minutes=30))
        print("fired:", [(f.schedule.id, f.fired) for f in fired])
        print("o-1:", (await orders.load("o-1")).status, "o-2:", (await orders.load("o-2")).status)


asyncio.run(main())
