"""Declarations of collector components: read models, event mappers, side-effect handlers.

Declaring is pure: ``@component.on(Event)`` records a handler; ``App.collect``
binds the component to topics and runs it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from ..errors import SpecError
from ..spec import Aggregate, Command, Envelope, Event

R = TypeVar("R", bound=BaseModel)
_F = TypeVar("_F", bound=Callable[..., Any])
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,99}$")

KeyFn = Callable[[Envelope[Any]], Any]


def default_key(ev: Envelope[Any]) -> Any:
    """The key a handler writes under when it names none: the event's aggregate id."""
    return ev.aggregate_id


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    """A registered handler: the function, how it is called and how its key is found."""

    fn: Callable[..., Any]
    wants_current: bool = False
    key: KeyFn = default_key
    is_async: bool = False
    #: Takes an ``EventBatch`` (``SideEffectHandler.on_batch``), not one envelope.
    batch: bool = False
    #: The columns a batch handler reads (``on_batch(columns=...)``; None: all of them).
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Upsert(Generic[R]):
    """Read-model operation: make ``row`` the current row of its key."""

    row: R


@dataclass(frozen=True, slots=True)
class Delete:
    """Read-model operation: remove the row with ``key``."""

    key: Any


@dataclass(frozen=True, slots=True)
class Send:
    """Mapper output: execute ``command`` on aggregate ``aggregate_id`` of ``target``.

    ``target`` is an aggregate spec class (or its topic name).
    """

    target: type[Aggregate] | str
    aggregate_id: str
    command: Command


class Component:
    """Base of collector components: a unique name and handlers per event type.

    ``ordered=False`` declares that the handlers do not need per-aggregate order, so the
    component may run on an unordered broker channel (SNS/SQS standard queues); binding
    a component that needs order to such a channel is a ``SpecError`` when the App starts.

    ``where`` is a SQL-style predicate over the columns of the topics it reads (``"type =
    'OrderPlaced' AND total > 100"``): only events it holds for reach the handlers; it is
    checked against each topic when the App builds (``PredicateError``).
    """

    kind: Literal["read_model", "mapper", "side_effect"]

    def __init__(self, name: str, *, ordered: bool = True, where: str | None = None) -> None:
        if not _NAME.match(name):
            raise SpecError(f"component name {name!r} must match {_NAME.pattern}")
        if where is not None and not isinstance(where, str):
            raise SpecError(f"{name}: where must be a predicate string, got {where!r}")
        self.name = name
        self.ordered = ordered
        self.where = where
        self.handlers: dict[type[Event], HandlerSpec] = {}
        self.topic_handlers: dict[str, HandlerSpec] = {}

    def _spec(self, fn: Callable[..., Any], key: KeyFn | None) -> HandlerSpec:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(params) not in (1, 2) or (len(params) == 2 and self.kind != "read_model"):
            allowed = "(event) or (event, current)" if self.kind == "read_model" else "(event)"
            raise SpecError(f"{self.name}: handler {fn.__name__} must take {allowed}")
        return HandlerSpec(
            fn=fn,
            wants_current=len(params) == 2,
            key=key or default_key,
            is_async=inspect.iscoroutinefunction(fn),
        )

    def on(self, *events: type[Event], key: KeyFn | None = None) -> Callable[[_F], _F]:
        """Register the decorated function for ``events``.

        ``key`` (read models) picks the row a handler reads as ``current``;
        default: the event's aggregate id.
        """
        return self._register("on", events, lambda fn: self._spec(fn, key))

    def _register(
        self,
        verb: str,
        events: tuple[type[Event], ...],
        spec_of: Callable[[Callable[..., Any]], HandlerSpec],
    ) -> Callable[[_F], _F]:
        """The decorator of ``@<verb>(*events)``: checks ``events``, then registers the
        decorated function's ``spec_of`` for each (one handler per event class)."""
        if not events:
            raise SpecError(f"{self.name}: @{verb} needs at least one event class")
        for e in events:
            if not (isinstance(e, type) and issubclass(e, Event)):
                raise SpecError(f"{self.name}: @{verb} expects Event classes, got {e!r}")

        def register(fn: _F) -> _F:
            spec = spec_of(fn)
            for e in events:
                if e in self.handlers:
                    raise SpecError(f"{self.name}: two handlers for {e.__name__}")
                self.handlers[e] = spec
            return fn

        return register

    def on_topic(self, topic: str, *, key: KeyFn | None = None) -> Callable[[_F], _F]:
        """Register the decorated function for every row of a schema topic (e.g. ``cdc.orders``)."""

        def register(fn: _F) -> _F:
            if topic in self.topic_handlers:
                raise SpecError(f"{self.name}: two handlers for topic {topic!r}")
            self.topic_handlers[topic] = self._spec(fn, key)
            return fn

        return register


class ReadModel(Component, Generic[R]):
    """A keyed query table of pydantic rows kept up to date by event handlers.

    Handlers return ``Upsert(row)``, ``Delete(key)``, ``None`` or a list of them; a
    handler with a second parameter receives the current row of its key (or None).
    Rows and the checkpoint commit in one transaction (exactly-once effect).

    Example::

        directory = rv.ReadModel("customer_directory", row=CustomerRow, key="id")

        @directory.on(Created)
        def _(ev: rv.Envelope[Created]) -> rv.Upsert[CustomerRow]:
            return rv.Upsert(CustomerRow(id=ev.aggregate_id, name=ev.event.name))
    """

    kind = "read_model"

    def __init__(
        self,
        name: str,
        *,
        row: type[R],
        key: str,
        ordered: bool = True,
        where: str | None = None,
    ) -> None:
        super().__init__(name, ordered=ordered, where=where)
        if not (isinstance(row, type) and issubclass(row, BaseModel)):
            raise SpecError(f"{name}: row must be a pydantic model class")
        if not key or key not in row.model_fields:
            raise SpecError(f"{name}: key {key!r} is not a field of {row.__name__}")
        self.row = row
        self.key = key
        #: ``on_forget``'s hook: what a forgotten data subject changes in this table.
        self.forget_hook: HandlerSpec | None = None

    def on_forget(self, fn: _F) -> _F:
        """Register the decorated function as what ``App.forget(subject)`` does to this
        table after destroying the subject's key: ``fn(subject)`` or ``fn(subject,
        current)`` (the row keyed by the subject, or None), sync or async, returning
        ``Upsert``/``Delete`` ops like an event handler. Rows derived from the subject's
        personal data (a name copied into a row) are erased here; the events themselves
        read as ``rv.ERASED`` from then on.

        Example::

            @directory.on_forget
            def _(subject: str, current: CustomerRow | None) -> rv.Delete | None:
                return rv.Delete(subject) if current else None
        """
        if self.forget_hook is not None:
            raise SpecError(f"{self.name}: two on_forget hooks")
        self.forget_hook = self._spec(fn, None)
        return fn


class EventMapper(Component):
    """Maps events to commands on other aggregates (sagas, process managers).

    The commands inherit the event's correlation id and get its id as causation id;
    a deterministic command id makes redelivery harmless.

    Example::

        reserve = rv.EventMapper("reserve_stock")

        @reserve.on(OrderPlaced)
        def _(ev):
            return rv.Send(Inventory, ev.event.sku, Reserve(order_id=ev.aggregate_id))
    """

    kind = "mapper"


class SideEffectHandler(Component):
    """Runs side effects (emails, webhooks) at least once, with retries and dead letters.

    Use ``idempotency_key(ev)`` with the external system to make repeats harmless.
    """

    kind = "side_effect"

    def __init__(
        self,
        name: str,
        *,
        max_attempts: int = 3,
        backoff: float = 0.05,
        ordered: bool = True,
        where: str | None = None,
    ) -> None:
        super().__init__(name, ordered=ordered, where=where)
        if max_attempts < 1:
            raise SpecError(f"{name}: max_attempts must be >= 1")
        self.max_attempts = max_attempts
        self.backoff = backoff

    def on_batch(
        self, *events: type[Event], columns: Sequence[str] | None = None
    ) -> Callable[[_F], _F]:
        """Register the decorated function for ``events`` (all of one EventLog): it is
        called with an ``rv.EventBatch`` of every such event of a page (``page_size``),
        in offset order, instead of once per event.

        It is that log's only handler here. A batch that raises is tried again whole (up
        to ``max_attempts``), then each of its events is dead-lettered; a redrive calls it
        with a batch of one. Where the store reads Arrow natively (the ``arrow`` extra),
        a catch-up hands it pages that never became Python rows.

        ``columns`` names the columns the handler reads (of the log's ``arrow_schema``):
        the store reads only those, plus ``_offset``, ``_aggregate_id``, ``_type`` and
        ``_trace`` (the collector's own), and ``batch.arrow`` holds them in the schema's
        order; ``batch.envelopes()`` is then refused (an envelope needs every column). A
        log with personal fields reads every column and selects them after opening.

        Example::

            @counter.on_batch(Incremented, columns=["by"])
            async def _(batch: rv.EventBatch[Incremented]) -> None:
                totals["by"] += pc.sum(batch.arrow.column("by")).as_py()
        """
        wanted = None if columns is None else tuple(columns)
        if wanted is not None and (not wanted or len(set(wanted)) != len(wanted)):
            raise SpecError(f"{self.name}: on_batch columns must be distinct names, at least one")

        def batch_spec(fn: Callable[..., Any]) -> HandlerSpec:
            is_async = self._spec(fn, None).is_async
            return HandlerSpec(fn=fn, is_async=is_async, batch=True, columns=wanted)

        return self._register("on_batch", events, batch_spec)

    def idempotency_key(self, ev: Envelope[Any]) -> str:
        """A key that is the same on every delivery of ``ev`` to this handler."""
        return f"{self.name}:{ev.msg_id}"


def as_ops(out: Any) -> list[Any]:
    """Normalise a handler's return value to a list."""
    if out is None:
        return []
    if isinstance(out, Upsert | Delete | Send):
        return [out]
    if isinstance(out, Iterable):
        return list(out)
    return [out]


async def call(spec: HandlerSpec, *args: Any) -> Any:
    """Call a sync or async handler."""
    out = spec.fn(*args)
    if spec.is_async:
        return await out
    if isinstance(out, Awaitable):
        return await out
    return out
