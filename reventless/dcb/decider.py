"""The command handlers of a DCB log and the pure decision step they run.

A handler is registered for one command type with the decision models it needs, each
given by name: a model class (built from the command's fields of the same names as its
constructor's parameters), a function of the command, or a ready instance. The handler
takes the command and one keyword argument per model, the model's folded state, and
returns the events to append (one, a list, or None) or raises ``rv.Rejected``.

``Decider.decide`` is the whole decision without I/O: it builds the models, folds each on
the given events that match its own query, and calls the handler. ``DcbLog.execute``
runs it on what the store returns for the union of the models' queries and appends
under the condition derived from that query (``reventless.dcb.execute``).

Checks run when a handler is declared: the command is a ``Command`` class, has no other
handler, the handler's parameters are the command and exactly the named models, a model
class folds only events of the log and its constructor's parameters are fields of the
command. A model given as a function is checked when it is first built.

Example::

    courses = rv.Decider(events=CourseDefined | CourseCapacityChanged | StudentSubscribed)

    @courses.decides(
        SubscribeStudent,
        capacity=CourseCapacity,  # CourseCapacity(course_id=cmd.course_id)
        taken=lambda c: CourseSubscriptions(c.course_id),
    )
    def subscribe(cmd: SubscribeStudent, capacity: int | None, taken: int) -> StudentSubscribed:
        if capacity is None:
            raise rv.Rejected("no_such_course", cmd.course_id)
        if taken >= capacity:
            raise rv.Rejected("course_full", cmd.course_id)
        return StudentSubscribed(student_id=cmd.student_id, course_id=cmd.course_id)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import SpecError, UnhandledCommandError
from ..spec import Command, Event, union_members
from ..tags import Query
from .decision import DecisionModel

__all__ = ["Decider", "HandlerSpec", "ModelSource", "Seen"]

C = TypeVar("C", bound=Command)
_F = TypeVar("_F", bound=Callable[..., Any])

#: How a handler names a model it needs: a class built from the command's fields, a
#: function of the command, or a ready instance.
ModelSource = type[DecisionModel[Any]] | Callable[[C], DecisionModel[Any]] | DecisionModel[Any]

#: An event as a decision sees it: the event and the tags it carries in the log.
Seen = tuple[Event, Collection[str]]


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """A registered command handler: its function and how to build its models."""

    command: type[Command]
    fn: Callable[..., Any]
    models: Mapping[str, Callable[[Command], DecisionModel[Any]]]


def _params(cls: type[DecisionModel[Any]]) -> list[inspect.Parameter]:
    sig = inspect.signature(cls.__init__)
    return list(sig.parameters.values())[1:]


class Decider:
    """The command handlers of one DCB log (pure: registering does no I/O).

    ``events`` is the log's event union; handlers may only use models that fold those
    events and may only return them. A ``DcbLog`` has its own (``log.decides``) and can
    take in those of a ``Decider`` declared in a model module (``log.include``).

    Example::

        usernames = rv.Decider(events=AccountRegistered | AccountClosed)

        @usernames.decides(Register, claimed=UsernameClaimed)
        def register(cmd: Register, claimed: bool) -> AccountRegistered:
            if claimed:
                raise rv.Rejected("username_taken", cmd.username)
            return AccountRegistered(username=cmd.username)
    """

    def __init__(self, events: Any, *, name: str = "decider") -> None:
        self.name = name
        self.event_classes: tuple[type[Event], ...] = union_members(events, f"{name}.events")
        #: The log's event classes by event type.
        self.event_types = {e.event_type: e for e in self.event_classes}
        self.handlers: dict[type[Command], HandlerSpec] = {}

    # -- declaring -------------------------------------------------------------------------

    def decides(self, command: type[C], **models: ModelSource[C]) -> Callable[[_F], _F]:
        """Register the decorated function as the handler of ``command``.

        Each keyword names a model the handler receives (folded) under that name.
        """
        if not (isinstance(command, type) and issubclass(command, Command)):
            raise SpecError(f"@decides expects a Command subclass, got {command!r}")
        if command in self.handlers:
            raise SpecError(f"{self.name}: two handlers for command {command.__name__}")
        builders = {name: self._builder(command, name, source) for name, source in models.items()}

        def mark(fn: _F) -> _F:
            self._check_signature(command, fn, list(models))
            if command in self.handlers:
                raise SpecError(f"{self.name}: two handlers for command {command.__name__}")
            self.handlers[command] = HandlerSpec(command, fn, builders)
            return fn

        return mark

    def include(self, other: Decider) -> None:
        """Take in the handlers of ``other`` (its events must all be events of this log)."""
        for e in other.event_classes:
            self._check_event(f"{other.name}.events", e)
        for command, spec in other.handlers.items():
            if command in self.handlers and self.handlers[command] is not spec:
                raise SpecError(f"{self.name}: two handlers for command {command.__name__}")
            self.handlers[command] = spec

    def _check_event(self, owner: str, e: type[Event]) -> None:
        if self.event_types.get(e.event_type) is not e:
            raise SpecError(
                f"{owner}: {e.__name__} is not an event of {self.name} "
                f"({', '.join(sorted(self.event_types))})"
            )

    def _check_model(self, owner: str, cls: type[DecisionModel[Any]]) -> None:
        for e in cls.event_classes:
            self._check_event(f"{owner} ({cls.__name__} folds it)", e)

    def _builder(
        self, command: type[Command], name: str, source: Any
    ) -> Callable[[Command], DecisionModel[Any]]:
        owner = f"{self.name}: {command.__name__} model {name!r}"
        if isinstance(source, DecisionModel):
            self._check_model(owner, type(source))
            return lambda _cmd: source
        if isinstance(source, type) and issubclass(source, DecisionModel):
            self._check_model(owner, source)
            return self._from_fields(owner, command, source)
        if not callable(source):
            raise SpecError(f"{owner}: expected a DecisionModel class, instance or function")
        checked: set[type[DecisionModel[Any]]] = set()

        def build(cmd: Command) -> DecisionModel[Any]:
            model = source(cmd)
            if not isinstance(model, DecisionModel):
                raise SpecError(f"{owner}: the function returned {model!r}, not a DecisionModel")
            if type(model) not in checked:
                self._check_model(owner, type(model))
                checked.add(type(model))
            return model

        return build

    @staticmethod
    def _from_fields(
        owner: str, command: type[Command], cls: type[DecisionModel[Any]]
    ) -> Callable[[Command], DecisionModel[Any]]:
        """Build ``cls`` from the command's fields named like its constructor's parameters."""
        names: list[str] = []
        for p in _params(cls):
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.name not in command.model_fields:
                if p.default is not p.empty:
                    continue
                raise SpecError(
                    f"{owner}: {cls.__name__}() needs {p.name!r}, which {command.__name__} "
                    "has no field for (pass a function of the command instead)"
                )
            names.append(p.name)

        def build(cmd: Command) -> DecisionModel[Any]:
            return cls(**{n: getattr(cmd, n) for n in names})

        return build

    def _check_signature(
        self, command: type[Command], fn: Callable[..., Any], names: list[str]
    ) -> None:
        """The handler takes the command first, then exactly the named models by keyword."""
        owner = f"{self.name}: handler {getattr(fn, '__name__', fn)!r} of {command.__name__}"
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{owner}: cannot read its signature ({exc})") from None
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            raise SpecError(f"{owner}: its first parameter must take the command")
        rest = params[1:]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in rest):
            return
        takes = {
            p.name
            for p in rest
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        required = {
            p.name
            for p in rest
            if p.default is inspect.Parameter.empty
            and p.kind is not inspect.Parameter.VAR_POSITIONAL
        }
        missing, unknown = sorted(set(names) - takes), sorted(required - set(names))
        if missing or unknown:
            raise SpecError(
                f"{owner}: it must take the models {sorted(names)} as keyword parameters"
                + (f"; no parameter for {missing}" if missing else "")
                + (f"; no model named {unknown}" if unknown else "")
            )

    # -- deciding --------------------------------------------------------------------------

    def handler(self, command: Command) -> HandlerSpec:
        """The handler of ``command``'s type (``UnhandledCommandError`` if none)."""
        spec = self.handlers.get(type(command))
        if spec is None:
            raise UnhandledCommandError(f"{self.name} has no @decides for {type(command).__name__}")
        return spec

    def models(self, command: Command) -> dict[str, DecisionModel[Any]]:
        """The models the handler of ``command`` needs, built for this command."""
        return {name: build(command) for name, build in self.handler(command).models.items()}

    @staticmethod
    def query(models: Iterable[DecisionModel[Any]]) -> Query:
        """The union of the models' queries (what a decision reads, and its condition)."""
        items = tuple(dict.fromkeys(i for m in models for i in m.query.items))
        return Query(items)

    @staticmethod
    def start(models: Mapping[str, DecisionModel[Any]]) -> dict[str, Any]:
        """The models' initial states, by name."""
        return {name: m.start() for name, m in models.items()}

    @staticmethod
    def fold(
        models: Mapping[str, DecisionModel[Any]], states: dict[str, Any], seen: Iterable[Seen]
    ) -> None:
        """Fold each model's state in ``states`` on the ``seen`` events matching its query.

        ``seen`` is in log order; events no model wants are skipped.
        """
        pairs = list(models.items())
        for event, tags in seen:
            etype = event.event_type
            for name, m in pairs:
                if m.wants(etype, tags):
                    states[name] = m.evolve(states[name], event)

    def run(self, command: Command, states: Mapping[str, Any]) -> list[Event]:
        """Call the handler of ``command`` with the folded ``states``; the events it decided.

        ``rv.Rejected`` propagates. The handler must not change the states it is given (a
        retry folds on from them).
        """
        spec = self.handler(command)
        return self._events(spec, spec.fn(command, **states))

    def decide(
        self,
        command: Command,
        seen: Iterable[Seen],
        models: Mapping[str, DecisionModel[Any]] | None = None,
    ) -> list[Event]:
        """The whole decision, pure: build the models, fold each on the ``seen`` events
        matching its query, run the handler; the events decided (``rv.Rejected``
        propagates).

        Example::

            seen = [(CourseDefined(course_id="c1", capacity=1), ["course:c1"])]
            courses.decide(SubscribeStudent(student_id="s1", course_id="c1"), seen)
        """
        if models is None:
            models = self.models(command)
        states = self.start(models)
        self.fold(models, states, seen)
        return self.run(command, states)

    def _events(self, spec: HandlerSpec, out: Any) -> list[Event]:
        if out is None:
            return []
        events = [out] if isinstance(out, Event) else list(out)
        for e in events:
            if not isinstance(e, Event) or self.event_types.get(e.event_type) is not type(e):
                raise SpecError(
                    f"{self.name}: the handler {spec.fn.__name__} of {spec.command.__name__} "
                    f"returned {e!r}, which is not an event of the log"
                )
        return events
