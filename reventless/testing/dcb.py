"""Given/when/then for DCB decisions and decision models (pure, in memory, no store).

``given_dcb(decider, *events)`` lays down past events as a DCB log would hold them, with
the tags their models declare (``rv.Tag`` fields) plus any extra ones (``tagged``), then
``when(command)`` runs the same decision ``DcbLog.execute`` runs: each model folds the
events matching its own query, the handler decides. ``fold_model`` folds one model.

Example::

    from reventless.testing import fold_model, given_dcb, tagged

    given_dcb(courses, CourseDefined(course_id="c1", capacity=1)).when(
        SubscribeStudent(student_id="s1", course_id="c1")
    ).then(StudentSubscribed(student_id="s1", course_id="c1"))

    given_dcb(
        courses,
        CourseDefined(course_id="c1", capacity=1),
        StudentSubscribed(student_id="s1", course_id="c1"),
    ).when(SubscribeStudent(student_id="s2", course_id="c1")).then_rejected("course_full")

    assert fold_model(CourseCapacity("c1"), CourseDefined(course_id="c1", capacity=5)) == 5
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..dcb.decider import Decider, Seen
from ..dcb.decision import DecisionModel, check_tag
from ..errors import Rejected, SpecError
from ..spec import Command, Event
from ..tags import event_tags

__all__ = ["DcbOutcome", "DcbScenario", "Tagged", "fold_model", "given_dcb", "tagged"]

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Tagged:
    """A given event with extra tags (as if appended with ``tags=``)."""

    event: Event
    tags: tuple[str, ...]


def tagged(event: Event, *tags: str) -> Tagged:
    """``event`` carrying ``tags`` besides those its model declares.

    Example::

        given_dcb(invoices, tagged(InvoiceCreated(number=1), "batch:7"))
    """
    return Tagged(event, tuple(check_tag("tagged", t) for t in tags))


def _seen(items: Iterable[Event | Tagged]) -> list[Seen]:
    out: list[Seen] = []
    for item in items:
        if isinstance(item, Tagged):
            event, extra = item.event, item.tags
        elif isinstance(item, Event):
            event, extra = item, ()
        else:
            raise TypeError(f"given events must be events or tagged(...) events, got {item!r}")
        out.append((event, tuple(dict.fromkeys((*event_tags(event), *extra)))))
    return out


class HasDecider(Protocol):
    """Anything that carries a ``Decider`` (a ``DcbLog``)."""

    @property
    def decider(self) -> Decider:
        """The log's command handlers."""
        ...


@dataclass
class DcbOutcome:
    """The result of ``when``: the events decided (with their tags) or the rejection."""

    events: list[Event]
    rejection: Rejected | None

    @property
    def tags(self) -> list[tuple[str, ...]]:
        """The tags each decided event carries (from its model's ``rv.Tag`` fields)."""
        return [event_tags(e) for e in self.events]

    def then(self, *expected: Event) -> list[Event]:
        """Assert the command decided exactly ``expected`` (nothing, if none given)."""
        if self.rejection is not None:
            raise AssertionError(f"expected events, the command was rejected: {self.rejection}")
        assert self.events == list(expected), f"decided {self.events}, expected {list(expected)}"
        return self.events

    def then_rejected(self, code: str | None = None) -> Rejected:
        """Assert the command was rejected (with ``code``, if given)."""
        if self.rejection is None:
            raise AssertionError(f"expected a rejection, the command decided {self.events}")
        if code is not None:
            assert self.rejection.code == code, (
                f"rejected {self.rejection.code!r}, expected {code!r}"
            )
        return self.rejection


class DcbScenario:
    """``given_dcb(decider, *events)``: a DCB log's past, in memory."""

    def __init__(self, decider: Decider, events: Sequence[Event | Tagged]) -> None:
        self.decider = decider
        self.seen = _seen(events)
        for event, _ in self.seen:
            if decider.event_types.get(event.event_type) is not type(event):
                raise SpecError(
                    f"given event {type(event).__name__} is not an event of {decider.name}"
                )

    def when(self, command: Command) -> DcbOutcome:
        """Decide ``command`` on the given events."""
        try:
            events = self.decider.decide(command, self.seen)
        except Rejected as r:
            return DcbOutcome([], r)
        return DcbOutcome(events, None)


def given_dcb(decider: Decider | HasDecider, *events: Event | Tagged) -> DcbScenario:
    """Start a DCB scenario from past ``events`` (in log order) of ``decider``'s log."""
    d = decider if isinstance(decider, Decider) else decider.decider
    return DcbScenario(d, events)


def fold_model(model: DecisionModel[S], *events: Event | Tagged) -> S:
    """Fold ``model`` on the given events that match its query (types and tags).

    Example::

        assert fold_model(StudentSubscriptions("s1"), *subscriptions) == 3
    """
    state = model.start()
    for event, tags in _seen(events):
        if model.wants(event.event_type, tags):
            state = model.evolve(state, event)
    return state
