"""Given/when/then helpers for aggregates, read models and mappers (pure, no I/O).

Example::

    from reventless.testing import given

    given(Customer, Created(name="Ada", address="1 Main St")).when(
        ChangeAddress(address="2 Side St")
    ).then(AddressChanged(address="2 Side St"))

    given(Customer).when(ChangeAddress(address="x")).then_rejected("not_registered")
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ..collect.component import Delete, EventMapper, ReadModel, Send, Upsert, as_ops
from ..errors import Rejected
from ..ids import now_us, uuid7_str
from ..spec import Aggregate, Command, Directive, Envelope, Event, Metadata
from .dcb import fold_model, given_dcb, tagged

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R", bound=BaseModel)

__all__ = [
    "envelope",
    "fold_model",
    "given",
    "given_dcb",
    "given_event",
    "given_events",
    "tagged",
]

_offsets = itertools.count(1)


def envelope(
    aggregate_id: str,
    event: Event,
    *,
    version: int = 1,
    topic: str = "test",
    meta: Metadata | None = None,
) -> Envelope[Any]:
    """An envelope as a collector would receive it (made-up offset and ids)."""
    return Envelope(
        event=event,
        topic=topic,
        offset=next(_offsets),
        type=event.event_type,
        aggregate_id=aggregate_id,
        version=version,
        msg_id=uuid7_str(),
        produced_at_us=now_us(),
        meta=meta or Metadata(),
        schema_version=event.schema_version,
    )


@dataclass
class Outcome(Generic[A]):
    """The result of ``when``: events decided (or the rejection) and the state after them."""

    state: A
    events: list[Event]
    rejection: Rejected | None
    #: What the handler scheduled or cancelled (``rv.Schedule``, ``rv.CancelSchedule``).
    scheduled: list[Directive] = field(default_factory=list)

    def then(self, *expected: Event) -> A:
        """Assert the command decided exactly ``expected``; return the new state."""
        if self.rejection is not None:
            raise AssertionError(f"expected events, command was rejected: {self.rejection}")
        assert self.events == list(expected), f"decided {self.events}, expected {list(expected)}"
        return self.state

    def then_scheduled(self, *expected: Directive) -> list[Directive]:
        """Assert the command scheduled (or cancelled) exactly ``expected``, in order.

        Example::

            given(Order).when(Place()).then_scheduled(
                rv.Schedule(Order, "test-1", Expire(), after=timedelta(minutes=30), id="x")
            )
        """
        if self.rejection is not None:
            raise AssertionError(f"expected schedules, command was rejected: {self.rejection}")
        assert self.scheduled == list(expected), (
            f"scheduled {self.scheduled}, expected {list(expected)}"
        )
        return self.scheduled

    def then_rejected(self, code: str | None = None) -> Rejected:
        """Assert the command was rejected (with ``code``, if given)."""
        if self.rejection is None:
            raise AssertionError(f"expected a rejection, command decided {self.events}")
        if code is not None:
            assert self.rejection.code == code, (
                f"rejected {self.rejection.code!r}, expected {code!r}"
            )
        return self.rejection


class Scenario(Generic[A]):
    """``given(Spec, *events)``: an aggregate folded from past events."""

    def __init__(self, spec: type[A], events: Iterable[Event], aggregate_id: str) -> None:
        self.state = spec(id=aggregate_id)
        for e in events:
            self.state.apply(e)

    def when(self, command: Command) -> Outcome[A]:
        """Decide ``command`` against the state; apply the events to a copy."""
        state = self.state.model_copy(deep=True)
        try:
            events, directives = state.decide_all(command)
        except Rejected as r:
            return Outcome(state, [], r)
        for e in events:
            state.apply(e)
        return Outcome(state, events, None, directives)


def given(spec: type[A], *events: Event, aggregate_id: str = "test-1") -> Scenario[A]:
    """Start an aggregate scenario from past ``events``."""
    return Scenario(spec, events, aggregate_id)


class ReadModelScenario(Generic[R]):
    """Runs a read model's handlers over events in memory."""

    def __init__(self, model: ReadModel[R], events: Iterable[tuple[str, Event] | Envelope[Any]]):
        self.model = model
        self.rows: dict[Any, R] = {}
        versions: dict[str, int] = {}
        for item in events:
            if isinstance(item, Envelope):
                ev = item
            else:
                agg, e = item
                versions[agg] = versions.get(agg, 0) + 1
                ev = envelope(agg, e, version=versions[agg])
            spec = model.handlers.get(type(ev.event))
            if spec is None:
                continue
            current = self.rows.get(spec.key(ev))
            out = spec.fn(ev, current) if spec.wants_current else spec.fn(ev)
            for op in as_ops(out):
                if isinstance(op, Upsert):
                    self.rows[getattr(op.row, model.key)] = op.row
                elif isinstance(op, Delete):
                    self.rows.pop(op.key, None)
                else:
                    raise AssertionError(f"handler returned {op!r}")

    def then_rows(self, *expected: R) -> dict[Any, R]:
        """Assert the table holds exactly ``expected`` rows (any order)."""
        want = {getattr(r, self.model.key): r for r in expected}
        assert self.rows == want, f"rows {self.rows}, expected {want}"
        return self.rows


def given_events(
    model: ReadModel[R], *events: tuple[str, Event] | Envelope[Any]
) -> ReadModelScenario[R]:
    """Run ``model``'s handlers over ``(aggregate_id, event)`` pairs."""
    return ReadModelScenario(model, events)


class MapperScenario:
    """Runs a mapper's handler for one event."""

    def __init__(self, mapper: EventMapper, ev: Envelope[Any]) -> None:
        spec = mapper.handlers.get(type(ev.event))
        ops = [] if spec is None else as_ops(spec.fn(ev))
        self.sends: list[Send] = [s for s in ops if isinstance(s, Send)]
        self.scheduled: list[Directive] = [s for s in ops if isinstance(s, Directive)]

    def then_commands(self, *expected: Send) -> list[Send]:
        """Assert the mapper sent exactly ``expected``."""
        assert self.sends == list(expected), f"sent {self.sends}, expected {list(expected)}"
        return self.sends

    def then_scheduled(self, *expected: Directive) -> list[Directive]:
        """Assert the mapper scheduled (or cancelled) exactly ``expected``, in order."""
        assert self.scheduled == list(expected), (
            f"scheduled {self.scheduled}, expected {list(expected)}"
        )
        return self.scheduled


def given_event(mapper: EventMapper, aggregate_id: str, event: Event) -> MapperScenario:
    """Run ``mapper`` on one event of ``aggregate_id``."""
    return MapperScenario(mapper, envelope(aggregate_id, event))
