"""The modelling surface: events, commands, aggregate specs and their decorators.

Declaring is pure: decorators only record metadata on functions, and the checks
run when the class is created.

Example::

    class Created(rv.Event):
        name: str

    class Register(rv.Command):
        name: str

    class Customer(rv.Aggregate):
        events = Created
        name: str = ""

        @rv.handles(Register)
        def register(self, cmd: Register) -> Created:
            if self.version:
                raise rv.Rejected("already_registered", self.id)
            return Created(name=cmd.name)

        @rv.applies(Created)
        def _created(self, e: Created) -> None:
            self.name = e.name
"""

from __future__ import annotations

import ipaddress
import types
import typing
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from .errors import MetadataError, ReservedNameError, SpecError, UnhandledCommandError

__all__ = [
    "Aggregate",
    "Command",
    "Directive",
    "Envelope",
    "Event",
    "Metadata",
    "applies",
    "check_field_names",
    "handles",
    "union_members",
    "upcasts",
]

_F = TypeVar("_F", bound=Callable[..., Any])
E = TypeVar("E")


def check_field_names(owner: str, names: Iterable[str]) -> None:
    """Raise ``ReservedNameError`` if a user field name starts with ``_`` (reserved columns)."""
    for name in names:
        if name.startswith("_"):
            raise ReservedNameError(
                f"{owner}: field {name!r} starts with '_': names with a leading underscore "
                "are reserved for log columns (_offset, _row_idx, _produced_at, ...)"
            )


def _check_model_names(cls: type[BaseModel]) -> None:
    private = getattr(cls, "__private_attributes__", {})
    check_field_names(cls.__name__, private)
    check_field_names(cls.__name__, cls.model_fields)
    for name, info in cls.model_fields.items():
        for alias in (info.alias, info.validation_alias, info.serialization_alias):
            if isinstance(alias, str) and alias.startswith("_"):
                check_field_names(f"{cls.__name__}.{name} (alias)", [alias])


class Event(BaseModel):
    """Base class of domain events: an immutable pydantic model.

    ``event_type`` (default: the class name) discriminates the topic's union;
    ``schema_version`` (default 1) is stored with every event.

    Example::

        class AddressChanged(rv.Event):
            address: str
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str] = "Event"
    schema_version: ClassVar[int] = 1
    #: Upcaster per stored version (``@rv.upcasts``): turns version N data into N+1.
    upcasters: ClassVar[dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}
    #: Fields that older versions stored and this one dropped: their columns stay.
    retired_fields: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "event_type" not in cls.__dict__:
            cls.event_type = cls.__name__
        if not isinstance(cls.schema_version, int) or cls.schema_version < 1:
            raise SpecError(f"{cls.__name__}.schema_version must be an int >= 1")
        _check_model_names(cls)
        ups: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
        retired: dict[str, Any] = {}
        for attr in vars(cls).values():
            fn = getattr(attr, "__func__", attr)
            mark = getattr(fn, "__rv_upcasts__", None)
            if mark is None:
                continue
            version, old = mark
            if not 1 <= version < cls.schema_version:
                raise SpecError(
                    f"{cls.__name__}: @upcasts(from_version={version}) must be below "
                    f"schema_version {cls.schema_version}"
                )
            if version in ups:
                raise SpecError(f"{cls.__name__}: two upcasters from version {version}")
            ups[version] = fn
            retired.update(old)
        check_field_names(f"{cls.__name__} (retired)", retired)
        clash = set(retired) & set(cls.model_fields)
        if clash:
            raise SpecError(f"{cls.__name__}: retired fields {sorted(clash)} are still fields")
        cls.upcasters, cls.retired_fields = ups, retired


class Command(BaseModel):
    """Base class of commands: an immutable pydantic model, named in the imperative.

    Example::

        class Register(rv.Command):
            name: str
    """

    model_config = ConfigDict(frozen=True, extra="forbid")


def handles(command: type[Command]) -> Callable[[_F], _F]:
    """Mark an aggregate method as the handler (decide step) of ``command``.

    The method receives the command and returns ``None``, one event, or a list of
    events; it rejects by raising ``rv.Rejected(code, detail)``.
    """
    if not (isinstance(command, type) and issubclass(command, Command)):
        raise SpecError(f"@handles expects a Command subclass, got {command!r}")

    def mark(fn: _F) -> _F:
        fn.__rv_handles__ = command  # type: ignore[attr-defined]
        return fn

    return mark


def applies(event: type[Event]) -> Callable[[_F], _F]:
    """Mark an aggregate method as the applier (evolve step) of ``event``."""
    if not (isinstance(event, type) and issubclass(event, Event)):
        raise SpecError(f"@applies expects an Event subclass, got {event!r}")

    def mark(fn: _F) -> _F:
        fn.__rv_applies__ = event  # type: ignore[attr-defined]
        return fn

    return mark


def upcasts(
    from_version: int, *, retired: dict[str, Any] | None = None
) -> Callable[[Callable[[dict[str, Any]], dict[str, Any]]], Any]:
    """Mark a function in an event class as its upcaster from ``from_version``.

    The function takes the stored data of a version-``from_version`` event (a dict of
    its columns, JSON-compatible values) and returns the data of the next version.
    ``retired`` names the fields older versions stored that the current class dropped
    (name -> type): their columns stay in the topic so old events can still be read.

    Example::

        class Created(rv.Event):
            schema_version = 2
            name: str
            street: str

            @rv.upcasts(1, retired={"address": str})
            def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
                data["street"] = data.pop("address")
                return data
    """

    def mark(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
        fn.__rv_upcasts__ = (from_version, dict(retired or {}))  # type: ignore[attr-defined]
        return staticmethod(fn)

    return mark


def union_members(declared: Any, owner: str = "events") -> tuple[type[Event], ...]:
    """Flatten ``A | B | C`` (or one class, or a tuple) into event classes, checking names."""
    if isinstance(declared, tuple):
        members: tuple[Any, ...] = tuple(m for d in declared for m in union_members(d, owner))
    elif isinstance(declared, types.UnionType) or typing.get_origin(declared) is typing.Union:
        members = typing.get_args(declared)
    else:
        members = (declared,)
    seen: dict[str, type[Event]] = {}
    for m in members:
        if not (isinstance(m, type) and issubclass(m, Event)) or m is Event:
            raise SpecError(f"{owner}: {m!r} is not an Event subclass")
        other = seen.get(m.event_type)
        if other is not None and other is not m:
            raise SpecError(
                f"{owner}: event types {other.__qualname__} and {m.__qualname__} "
                f"share the name {m.event_type!r}"
            )
        seen[m.event_type] = m
    return tuple(seen.values())


class Directive:
    """Base of what a handler may return besides events or commands: an instruction the
    runtime carries out in the same transaction as what the handler produced
    (``rv.Schedule``, ``rv.CancelSchedule`` in ``reventless.scheduling``)."""

    __slots__ = ()


class Aggregate(BaseModel):
    """Base class of aggregate specs: the state is a pydantic model, behaviour is decorated.

    Subclasses set ``events`` to the union of their event classes, declare state
    fields with defaults, and decorate command handlers (``@handles``) and event
    appliers (``@applies``). ``id`` and ``version`` are maintained by the log.
    """

    model_config = ConfigDict(ignored_types=(types.UnionType,), validate_assignment=False)

    events: ClassVar[Any] = None
    topic_name: ClassVar[str] = ""
    event_classes: ClassVar[tuple[type[Event], ...]] = ()
    command_handlers: ClassVar[dict[type[Command], Callable[..., Any]]] = {}
    appliers: ClassVar[dict[type[Event], Callable[..., Any]]] = {}

    id: str = ""
    version: int = 0

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        name = cls.__name__
        if cls.events is None:
            raise SpecError(
                f"{name}: set `events = EventA | EventB` to the aggregate's event union"
            )
        if "topic_name" not in cls.__dict__:
            cls.topic_name = name
        cls.event_classes = union_members(cls.events, f"{name}.events")
        handlers: dict[type[Command], Callable[..., Any]] = {}
        appliers: dict[type[Event], Callable[..., Any]] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                cmd = getattr(fn, "__rv_handles__", None)
                if cmd is not None:
                    prev = handlers.get(cmd)
                    if prev is not None and prev.__name__ != attr and klass is cls:
                        raise SpecError(f"{name}: two handlers for command {cmd.__name__}")
                    handlers[cmd] = fn
                ev = getattr(fn, "__rv_applies__", None)
                if ev is not None:
                    prev = appliers.get(ev)
                    if prev is not None and prev.__name__ != attr and klass is cls:
                        raise SpecError(f"{name}: two appliers for event {ev.__name__}")
                    appliers[ev] = fn
        for ev in cls.event_classes:
            if ev not in appliers:
                raise SpecError(
                    f"{name}: event {ev.__name__} is in the union but has no @applies method"
                )
        for ev in appliers:
            if ev not in cls.event_classes:
                raise SpecError(f"{name}: @applies({ev.__name__}) but it is not in `events`")
        cls.command_handlers = handlers
        cls.appliers = appliers

    def decide(self, command: Command) -> list[Event]:
        """Run the command handler and return the events it decided (no state change).
        Directives it returned beside them (``rv.Schedule``) are in ``decide_all``."""
        return self.decide_all(command)[0]

    def decide_all(self, command: Command) -> tuple[list[Event], list[Directive]]:
        """Run the command handler: the events it decided and, apart, the directives it
        returned among them (``rv.Schedule``, ``rv.CancelSchedule``), each in order."""
        handler = type(self).command_handlers.get(type(command))
        if handler is None:
            raise UnhandledCommandError(
                f"{type(self).__name__} has no @handles for {type(command).__name__}"
            )
        out = handler(self, command)
        if out is None:
            return [], []
        allowed = type(self).appliers  # keyed by exactly the union's event classes
        if type(out) in allowed:  # one event (the common case: no isinstance on a model)
            return [out], []
        decided: list[Any] = [out] if isinstance(out, _DECIDED) else list(out)
        events: list[Event] = []
        directives: list[Directive] = []
        for e in decided:
            if type(e) in allowed:
                events.append(e)
            elif isinstance(e, Directive):
                directives.append(e)
            else:
                raise SpecError(
                    f"{type(self).__name__}.{handler.__name__} returned {type(e).__name__}, "
                    "which is not in the aggregate's `events` union"
                )
        return events, directives

    def apply(self, event: Event) -> None:
        """Evolve the state by one event and bump ``version``."""
        type(self).appliers[type(event)](self, event)
        # straight into the model's values: pydantic's __setattr__ costs more than the
        # applier itself, and assignments are not validated (validate_assignment=False)
        self.__dict__["version"] += 1


_MAX_META = 512
#: What a handler may return one of, or a list of (a tuple: isinstance on ``A | B``
#: builds the union on every call).
_DECIDED = (Event, Directive)


class _MetadataFields(NamedTuple):
    correlation_id: str | None = None
    causation_id: str | None = None
    user: str | None = None
    service: str | None = None
    ip: str | None = None
    tenant: str | None = None


_tuple_new = tuple.__new__


class Metadata(_MetadataFields):
    """Caller-supplied event metadata; what is left out is filled in by the log.

    Example::

        await log.execute("c-1", cmd, meta=rv.Metadata(user="ada", ip="10.0.0.1"))

    Immutable: a named tuple of its six fields, since one is read back with every stored
    event (built in C from a page's columns, no Python call per event).
    """

    __slots__ = ()

    def __new__(
        cls,
        correlation_id: str | None = None,
        causation_id: str | None = None,
        user: str | None = None,
        service: str | None = None,
        ip: str | None = None,
        tenant: str | None = None,
    ) -> Metadata:
        values = (correlation_id, causation_id, user, service, ip, tenant)
        for name, value in zip(_MetadataFields._fields, values, strict=True):
            if value is None:
                continue
            if not isinstance(value, str):
                raise MetadataError(f"metadata {name} must be a string, got {type(value).__name__}")
            if not value or len(value) > _MAX_META or not value.isprintable():
                raise MetadataError(f"metadata {name} must be 1..{_MAX_META} printable characters")
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError as exc:
                raise MetadataError(f"metadata ip {ip!r} is not an IP address") from exc
        return _tuple_new(cls, values)

    @classmethod
    def trusted(
        cls,
        correlation_id: str | None,
        causation_id: str | None,
        user: str | None,
        service: str | None,
        ip: str | None,
        tenant: str | None,
    ) -> Metadata:
        """Build without validation (values read back from the store were validated on write)."""
        return _tuple_new(cls, (correlation_id, causation_id, user, service, ip, tenant))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # unpickled and copied as read back: not validated again (the named tuple's
        # ``_make`` skips this ``__new__``)
        return type(self)._make, (tuple(self),)


_NO_META = Metadata()


class Envelope(NamedTuple, Generic[E]):
    """One stored event with its log coordinates and metadata (immutable).

    ``event`` is the decoded pydantic event (or a row dict for schema-only topics).
    ``tags`` are the event's tags (topics whose events declare tags, and DCB logs).
    A named tuple: built once per delivered event, so it must be cheap to make.
    """

    event: E
    topic: str
    offset: int
    type: str
    aggregate_id: str | None
    version: int | None
    msg_id: str
    produced_at_us: int
    meta: Metadata = _NO_META
    schema_version: int = 1
    row_idx: int = 0
    tags: tuple[str, ...] = ()
    #: The W3C trace context of the command that appended it (``reventless.telemetry``).
    trace: str | None = None

    @property
    def produced_at(self) -> datetime:
        """When the event was appended (UTC)."""
        return datetime.fromtimestamp(self.produced_at_us / 1_000_000, tz=UTC)
