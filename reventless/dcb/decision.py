"""Decision models: small, declarative projections that a DCB decision folds.

A decision model names the events it needs (the types it folds, from its ``@folds``
methods, and the tags it was constructed with) and folds them into a state of type
``S``. A command handler asks for several models; the query of the decision is the union
of theirs, read once, and each model folds only the events that match its own query.

A model's query is one item: events of any folded type carrying all of the model's tags.
Declaring is pure: ``@folds`` records metadata and the checks run when the class is
created (two folds of one event type, a fold of something that is no event) or the model
is constructed (no fold at all, a malformed tag).

Example::

    class CourseCapacity(rv.DecisionModel[int | None]):
        \"\"\"The course's capacity; None while the course is not defined.\"\"\"

        def __init__(self, course_id: str) -> None:
            super().__init__(None, tags=[f"course:{course_id}"])

        @rv.folds(CourseDefined)
        def _defined(self, state: int | None, e: CourseDefined) -> int | None:
            return e.capacity

        @rv.folds(CourseCapacityChanged)
        def _changed(self, state: int | None, e: CourseCapacityChanged) -> int | None:
            return e.capacity

    assert CourseCapacity("c1").fold([CourseDefined(course_id="c1", capacity=10)]) == 10
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable
from typing import Any, ClassVar, Generic, TypeVar

from ..errors import MetadataError, SpecError
from ..spec import Event
from ..tags import Query, QueryItem, matches
from ..tags import check_tag as tags_check

__all__ = ["DecisionModel", "folds"]

S = TypeVar("S")
_F = TypeVar("_F", bound=Callable[..., Any])


def folds(event: type[Event]) -> Callable[[_F], _F]:
    """Mark a method of a ``DecisionModel`` as the fold of ``event``.

    The method takes the state and the event and returns the next state; it must not
    change the state it was given (states may be shared, e.g. the initial one).

    Example::

        @rv.folds(StudentSubscribed)
        def _subscribed(self, count: int, e: StudentSubscribed) -> int:
            return count + 1
    """
    if not (isinstance(event, type) and issubclass(event, Event)) or event is Event:
        raise SpecError(f"@folds expects an Event subclass, got {event!r}")

    def mark(fn: _F) -> _F:
        fn.__rv_folds__ = event  # type: ignore[attr-defined]
        return fn

    return mark


def check_tag(owner: str, tag: object) -> str:
    """``tag`` if it is a valid tag, else ``SpecError`` naming ``owner``."""
    try:
        return tags_check(tag)
    except MetadataError as exc:
        raise SpecError(f"{owner}: {exc}") from None


class DecisionModel(Generic[S]):
    """A projection a decision needs: its query (folded types + tags) and its fold.

    Subclass it with the state type, pass the initial state and the tags to
    ``__init__`` (usually from your own constructor's arguments) and decorate one method
    per event type with ``@rv.folds``. Instances are cheap: a decision builds fresh ones
    from each command.

    Example::

        class StudentSubscriptions(rv.DecisionModel[int]):
            \"\"\"How many courses the student is subscribed to.\"\"\"

            def __init__(self, student_id: str) -> None:
                super().__init__(0, tags=[f"student:{student_id}"])

            @rv.folds(StudentSubscribed)
            def _subscribed(self, count: int, e: StudentSubscribed) -> int:
                return count + 1
    """

    #: The fold of each event type (collected from ``@folds`` methods, subclasses included).
    folders: ClassVar[dict[type[Event], Callable[..., Any]]] = {}
    #: The folded event classes, in declaration order.
    event_classes: ClassVar[tuple[type[Event], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        folders: dict[type[Event], Callable[..., Any]] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                ev = getattr(fn, "__rv_folds__", None)
                if ev is None:
                    continue
                prev = folders.get(ev)
                if prev is not None and prev.__name__ != attr and klass is cls:
                    raise SpecError(f"{cls.__name__}: two @folds for event {ev.__name__}")
                folders[ev] = fn
        names: dict[str, type[Event]] = {}
        for ev in folders:
            other = names.setdefault(ev.event_type, ev)
            if other is not ev:
                raise SpecError(
                    f"{cls.__name__}: {other.__qualname__} and {ev.__qualname__} share the "
                    f"event type {ev.event_type!r}"
                )
        cls.folders = folders
        cls.event_classes = tuple(folders)

    def __init__(self, initial: S, *, tags: Iterable[str] = ()) -> None:
        cls = type(self)
        if not cls.folders:
            raise SpecError(f"{cls.__name__} folds no event: decorate a method with @rv.folds")
        if isinstance(tags, str):  # a lone tag would be split into characters
            raise SpecError(f"{cls.__name__}: tags must be a list of strings, got {tags!r}")
        self.initial = initial
        self.tags: tuple[str, ...] = tuple(dict.fromkeys(check_tag(cls.__name__, t) for t in tags))
        self.types: tuple[str, ...] = tuple(e.event_type for e in cls.event_classes)
        #: The events this model folds: one item, any folded type carrying every tag.
        self.query = Query((QueryItem(types=self.types, tags=self.tags),))
        self._by_type = {e.event_type: f for e, f in cls.folders.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tags={list(self.tags)!r})"

    def start(self) -> S:
        """A fresh initial state (a copy: folds that mutate cannot leak into the next one)."""
        return copy.deepcopy(self.initial)

    def wants(self, event_type: str, tags: Collection[str]) -> bool:
        """True if an event of ``event_type`` carrying ``tags`` matches this model's query."""
        return matches(self.query, event_type, tags)

    def evolve(self, state: S, event: Event) -> S:
        """The state after ``event`` (which must be of a folded type)."""
        fn = self._by_type.get(event.event_type)
        if fn is None:
            raise SpecError(f"{type(self).__name__} does not fold {type(event).__name__}")
        out: S = fn(self, state, event)
        return out

    def fold(self, events: Iterable[Event]) -> S:
        """Fold ``events`` (already selected: no query filter) from the initial state."""
        state = self.start()
        for e in events:
            state = self.evolve(state, e)
        return state
