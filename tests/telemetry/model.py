"""The specs the telemetry tests share: counters (tests.model), a ledger a mapper sends
commands to, and a side effect that always fails (dead letters)."""

from __future__ import annotations

from typing import Any

import reventless as rv
from tests.model import Counter, Increment, Incremented, totals


class Noted(rv.Event):
    n: int


class Note(rv.Command):
    n: int


class Ledger(rv.Aggregate):
    events = Noted

    @rv.handles(Note)
    def note(self, cmd: Note) -> Noted:
        return Noted(n=cmd.n)

    @rv.applies(Noted)
    def _noted(self, e: Noted) -> None:
        pass


to_ledger = rv.EventMapper("to_ledger")


@to_ledger.on(Incremented)
def _send(ev: rv.Envelope[Incremented]) -> rv.Send:
    assert ev.aggregate_id is not None
    return rv.Send(Ledger, ev.aggregate_id, Note(n=ev.event.by))


failing = rv.SideEffectHandler("always_fails", max_attempts=1, backoff=0)


@failing.on(Incremented)
def _fail(ev: rv.Envelope[Incremented]) -> None:
    raise RuntimeError("the mail server said no")


def chain_app(store: str, broker: Any = "memory://", *, mapper: bool = True) -> rv.App:
    """Counter -> totals read model (and -> mapper -> Ledger)."""
    app = rv.App(store=store, broker=broker)
    app.event_log(Counter)
    app.event_log(Ledger)
    app.collect(totals)
    if mapper:
        app.collect(to_ledger)
    return app


__all__ = ["Counter", "Increment", "Ledger", "Note", "chain_app", "failing", "to_ledger"]
