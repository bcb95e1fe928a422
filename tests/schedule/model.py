"""Specs the scheduling tests share: orders that expire unless paid, a mapper that
schedules reminders, a side effect that schedules follow-ups, and a flaky command."""

from __future__ import annotations

import collections
from datetime import UTC, datetime, timedelta

import reventless as rv

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
EXPIRY = timedelta(minutes=30)

#: How often each command handler ran, by name (firings are counted by reading the store).
DECIDED: collections.Counter[str] = collections.Counter()
#: ``Flaky`` fails this many more times before it succeeds.
FLAKY_FAILURES = {"left": 0}


class Placed(rv.Event):
    total: int


class Paid(rv.Event):
    pass


class Expired(rv.Event):
    pass


class Postponed(rv.Event):
    minutes: int


class Nudged(rv.Event):
    pass


class Place(rv.Command):
    total: int


class Pay(rv.Command):
    pass


class Expire(rv.Command):
    pass


class Postpone(rv.Command):
    minutes: int


class Remind(rv.Command):
    """Schedules an expiry on its own, with no event (a decision of schedules only)."""


class Nudge(rv.Command):
    pass


class Flaky(rv.Command):
    pass


class Arm(rv.Command):
    """Schedules ``Flaky`` a minute later (id ``flaky:<order>``)."""


class Ping(rv.Command):
    """Nudges and schedules another nudge an hour later, with a derived id."""


class Soon(rv.Command):
    """Schedules a nudge ``ms`` milliseconds later (id ``soon:<order>``)."""

    ms: int


def expiry(order_id: str, after: timedelta = EXPIRY) -> rv.Schedule:
    """The expiry ``Place`` schedules (and ``Postpone`` reschedules)."""
    return rv.Schedule(Order, order_id, Expire(), after=after, id=f"expire:{order_id}")


class Order(rv.Aggregate):
    events = Placed | Paid | Expired | Postponed | Nudged
    status: str = "new"
    nudges: int = 0

    @rv.handles(Place)
    def place(self, cmd: Place) -> list[rv.Event | rv.Schedule]:
        DECIDED["place"] += 1
        if self.version:
            raise rv.Rejected("placed", f"order {self.id} exists")
        return [Placed(total=cmd.total), expiry(self.id)]

    @rv.handles(Pay)
    def pay(self, cmd: Pay) -> list[rv.Event | rv.CancelSchedule]:
        if self.status != "placed":
            raise rv.Rejected("not_payable", self.status)
        return [Paid(), rv.CancelSchedule(f"expire:{self.id}")]

    @rv.handles(Postpone)
    def postpone(self, cmd: Postpone) -> list[rv.Event | rv.Schedule]:
        return [
            Postponed(minutes=cmd.minutes),
            expiry(self.id, timedelta(minutes=cmd.minutes)),
        ]

    @rv.handles(Remind)
    def remind(self, cmd: Remind) -> rv.Schedule:
        return expiry(self.id)

    @rv.handles(Expire)
    def expire(self, cmd: Expire) -> Expired:
        DECIDED["expire"] += 1
        if self.status != "placed":
            raise rv.Rejected("not_open", f"order {self.id} is {self.status}")
        return Expired()

    @rv.handles(Nudge)
    def nudge(self, cmd: Nudge) -> Nudged:
        return Nudged()

    @rv.handles(Arm)
    def arm(self, cmd: Arm) -> list[rv.Event | rv.Schedule]:
        return [
            Nudged(),
            rv.Schedule(Order, self.id, Flaky(), after=timedelta(minutes=1), id=f"flaky:{self.id}"),
        ]

    @rv.handles(Ping)
    def ping(self, cmd: Ping) -> list[rv.Event | rv.Schedule]:
        return [Nudged(), rv.Schedule(Order, self.id, Nudge(), after=timedelta(hours=1))]

    @rv.handles(Soon)
    def soon(self, cmd: Soon) -> rv.Schedule:
        return rv.Schedule(
            Order, self.id, Nudge(), after=timedelta(milliseconds=cmd.ms), id=f"soon:{self.id}"
        )

    @rv.handles(Flaky)
    def flaky(self, cmd: Flaky) -> Nudged:
        DECIDED["flaky"] += 1
        if FLAKY_FAILURES["left"] > 0:
            FLAKY_FAILURES["left"] -= 1
            raise RuntimeError("the flaky command failed")
        return Nudged()

    @rv.applies(Placed)
    def _placed(self, e: Placed) -> None:
        self.status = "placed"

    @rv.applies(Paid)
    def _paid(self, e: Paid) -> None:
        self.status = "paid"

    @rv.applies(Expired)
    def _expired(self, e: Expired) -> None:
        self.status = "expired"

    @rv.applies(Postponed)
    def _postponed(self, e: Postponed) -> None:
        pass

    @rv.applies(Nudged)
    def _nudged(self, e: Nudged) -> None:
        self.nudges += 1


#: A saga: an hour after an order is placed, nudge it (the id derives from the event).
reminders = rv.EventMapper("order_reminders")


@reminders.on(Placed)
def _remind(ev: rv.Envelope[Placed]) -> rv.Schedule:
    assert ev.aggregate_id is not None
    return rv.Schedule(Order, ev.aggregate_id, Nudge(), after=timedelta(hours=1))


#: A side effect that schedules a follow-up nudge a day after payment, by id.
follow_ups = rv.SideEffectHandler("order_follow_ups")


@follow_ups.on(Paid)
def _follow_up(ev: rv.Envelope[Paid]) -> rv.Schedule:
    assert ev.aggregate_id is not None
    return rv.Schedule(
        Order, ev.aggregate_id, Nudge(), after=timedelta(days=1), id=f"follow:{ev.aggregate_id}"
    )
