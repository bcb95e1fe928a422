"""Small specs shared by the tests."""

from __future__ import annotations

from pydantic import BaseModel

import reventless as rv


class Incremented(rv.Event):
    by: int = 1


class Reset(rv.Event):
    pass


class Increment(rv.Command):
    by: int = 1


class ResetCounter(rv.Command):
    pass


class Noop(rv.Command):
    pass


class Counter(rv.Aggregate):
    events = Incremented | Reset
    value: int = 0

    @rv.handles(Increment)
    def increment(self, cmd: Increment) -> Incremented:
        if cmd.by <= 0:
            raise rv.Rejected("bad_amount", f"cannot increment by {cmd.by}", by=cmd.by)
        return Incremented(by=cmd.by)

    @rv.handles(ResetCounter)
    def reset(self, cmd: ResetCounter) -> list[rv.Event]:
        return [Reset(), Incremented(by=0)]

    @rv.handles(Noop)
    def noop(self, cmd: Noop) -> None:
        return None

    @rv.applies(Incremented)
    def _inc(self, e: Incremented) -> None:
        self.value += e.by

    @rv.applies(Reset)
    def _reset(self, e: Reset) -> None:
        self.value = 0


class Total(BaseModel):
    id: str
    value: int
    events: int


totals: rv.ReadModel[Total] = rv.ReadModel("counter_totals", row=Total, key="id")


@totals.on(Incremented, Reset)
def _total(ev: rv.Envelope[Incremented | Reset], current: Total | None) -> rv.Upsert[Total]:
    assert ev.aggregate_id is not None
    row = current or Total(id=ev.aggregate_id, value=0, events=0)
    value = 0 if isinstance(ev.event, Reset) else row.value + ev.event.by
    return rv.Upsert(Total(id=row.id, value=value, events=row.events + 1))
