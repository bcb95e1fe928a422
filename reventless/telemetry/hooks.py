"""The calls reventless makes at each point of interest: one per site, cheap when off.

Each hook reads ``STATE`` once; with neither traces nor metrics on it returns the shared
``NOOP`` context manager (or nothing) without allocating.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ParamSpec, Protocol, TypeVar

from . import tracing
from .logs import fields
from .metering import Backlogged, Instruments, Lagging, saw
from .state import STATE
from .tracing import NOOP, first_of, span

log = logging.getLogger("reventless.telemetry")
_CM = contextlib.AbstractContextManager[Any]


class Relaying(Protocol):
    """The relay as the publish hook sees it."""

    @property
    def store(self) -> Any: ...


class Collecting(Protocol):
    """A collector as the delivery hooks see it."""

    @property
    def name(self) -> str: ...
    @property
    def store(self) -> Any: ...


class Carrier(Protocol):
    """A broker message as the hooks see it (``reventless.broker.Message``)."""

    @property
    def topic(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def partition(self) -> int | None: ...


M = TypeVar("M", bound=Carrier)
T = TypeVar("T")
P = ParamSpec("P")


class _Measured:
    """A span (if tracing) and a duration recorded on success (if metrics)."""

    __slots__ = ("_done", "_span", "_t0")

    def __init__(self, cm: _CM, done: Callable[[float], None] | None) -> None:
        self._span, self._done, self._t0 = cm, done, 0.0

    def __enter__(self) -> Any:
        self._t0 = time.perf_counter()
        return self._span.__enter__()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if et is None and self._done is not None:
            self._done(time.perf_counter() - self._t0)
        return self._span.__exit__(et, e, tb)


# -- commands and appends ------------------------------------------------------------------


def command(topic: str, name: str, aggregate_id: str | None = None) -> _CM:
    """The span of one command's execution (decide, append, retries); a DCB decision has
    no ``aggregate_id``."""
    if STATE.tracer is None:
        return NOOP
    # few attributes: the SDK validates each one (the command is in the span's name)
    attrs = {"reventless.topic": topic}
    if aggregate_id is not None:
        attrs["reventless.aggregate.id"] = aggregate_id
    return span(f"execute {name}", attrs)


class _AppendEvent:
    """An append inside a command's span: an event on that span (cheaper than a child
    span; the command span's own duration covers it)."""

    __slots__ = ("_attrs", "_span", "_t0")

    def __init__(self, current: Any, attrs: dict[str, Any]) -> None:
        self._span, self._attrs, self._t0 = current, attrs, 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, et: type[BaseException] | None, *_: object) -> None:
        self._attrs["reventless.duration_s"] = time.perf_counter() - self._t0
        if et is not None:
            self._attrs["error.type"] = et.__name__
        self._span.add_event("append", self._attrs)


class _Append:
    """An append's duration (a histogram) and its events (a tally the events-appended
    counter reads when collected), around ``cm`` (its span or event, or ``NOOP``)."""

    __slots__ = ("_cm", "_events", "_metrics", "_t0", "_topic", "_where")

    def __init__(self, cm: _CM, metrics: Instruments, where: Mapping[str, str], n: int) -> None:
        self._cm, self._metrics, self._where, self._events, self._t0 = cm, metrics, where, n, 0.0

    def __enter__(self) -> Any:
        self._t0 = time.perf_counter()
        return self._cm.__enter__()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if et is None:
            m = self._metrics
            m.append_duration.record(time.perf_counter() - self._t0, self._where)
            m.tally_appended(self._where["db.collection.name"], self._events)
        return self._cm.__exit__(et, e, tb)


#: The attributes of an append, per (topic, database system): built once.
_WHERE: dict[tuple[str, str], dict[str, str]] = {}


def _where(topic: str, system: str) -> dict[str, str]:
    attrs = _WHERE.get((topic, system))
    if attrs is None:
        attrs = {"db.operation.name": "append", "db.collection.name": topic}
        if system:
            attrs["db.system.name"] = system
        if len(_WHERE) > 4096:  # topics are few; bound it anyway
            _WHERE.clear()
        _WHERE[(topic, system)] = attrs
    return attrs


def appending(topic: str, events: int, system: str = "") -> _CM:
    """One append transaction: its duration and the events appended; an event on the
    command's span, or a client span of its own outside a command."""
    tracer, metrics = STATE.tracer, STATE.metrics
    if tracer is None and metrics is None:
        return NOOP
    attrs = _where(topic, system)
    cm: _CM = NOOP
    if tracer is not None:
        current = tracing.current_span()
        if current is not None:
            # the command's span names the topic already; one the sampler left out gets
            # nothing (not even a child span: it would not be sampled either)
            if current.is_recording():
                cm = _AppendEvent(current, {"reventless.events": events})
        else:
            cm = span(f"append {topic}", attrs, kind=tracing.CLIENT)
    if metrics is None:
        return cm
    return _Append(cm, metrics, attrs, events)


def retried(topic: str, attempt: int, error: BaseException, component: str = "eventlog") -> None:
    """A command clashed with another writer and is retried (logged, counted): an event
    on its span. ``component``: ``eventlog``, or ``dcb`` for a DCB decision whose append
    condition failed."""
    tracing.event("retry", {"reventless.attempt": attempt, "exception.message": str(error)})
    if STATE.metrics is not None:
        STATE.metrics.retries.add(1, {"db.collection.name": topic})
    log.info(
        "a command on %s clashed with another writer (attempt %d), retrying: %s",
        topic,
        attempt,
        error,
        extra=fields(component, topic=topic),
    )


# -- publishing and delivery ---------------------------------------------------------------


async def publish(
    relay: Relaying,
    send: Callable[[list[M]], Awaitable[None]],
    topic: str,
    messages: list[M],
    traces: Callable[[], Sequence[str | None]],
) -> None:
    """The relay's publish of ``messages`` (through ``send``): a producer span continuing
    the first event's trace (linking the others) whose context the messages carry."""
    tracer, metrics = STATE.tracer, STATE.metrics
    if tracer is None and metrics is None:
        await send(messages)
        return
    for m in messages:
        last = m.headers.get("rv-last")
        if last is not None and last.isdigit():
            saw(relay.store, topic, m.partition or 0, int(last))
    attrs = {"messaging.operation.name": "publish", "messaging.destination.name": topic}
    t0 = time.perf_counter()
    if tracer is None:
        await send(messages)
    else:
        texts = traces()
        with span(
            f"publish {topic}",
            {**attrs, "messaging.batch.message_count": len(messages)},
            kind=tracing.PRODUCER,
            parent=first_of(texts),
            links_from=lambda: texts,
        ):
            extra = tracing.headers_of(tracing.traceparent())
            if extra:
                messages = [
                    dataclasses.replace(m, headers={**m.headers, **extra})  # type: ignore[type-var]
                    for m in messages
                ]
            await send(messages)
    if metrics is not None:
        metrics.publish_duration.record(time.perf_counter() - t0, attrs)
        metrics.sent.add(len(messages), {"messaging.destination.name": topic})


def _header_text(headers: Mapping[str, str]) -> str | None:
    parent = headers.get("traceparent")
    if not parent:
        return None
    state = headers.get("tracestate")
    return f"{parent} {state}" if state else parent


def receiving(collector: Collecting, messages: Sequence[Carrier]) -> _CM:
    """A broker delivery to collector ``group``: a consumer span continuing the
    publisher's context from the first message's headers (linking the others)."""
    tracer, metrics = STATE.tracer, STATE.metrics
    if tracer is None and metrics is None:
        return NOOP
    if not messages:
        return NOOP
    topic, group = messages[0].topic, collector.name
    if metrics is not None:
        metrics.consumed.add(
            len(messages),
            {"messaging.consumer.group.name": group, "messaging.destination.name": topic},
        )
        for m in messages:
            last = m.headers.get("rv-last")
            if last is not None and last.isdigit():
                saw(collector.store, m.topic, m.partition or 0, int(last))
    if tracer is None:
        return NOOP
    texts = [_header_text(m.headers) for m in messages]
    return span(
        f"receive {topic}",
        {
            "messaging.operation.name": "receive",
            "messaging.consumer.group.name": group,
            "messaging.destination.name": topic,
            "messaging.batch.message_count": len(messages),
        },
        kind=tracing.CONSUMER,
        parent=first_of(texts),
        links_from=lambda: texts,
    )


def batch(
    collector: Collecting,
    topic: str,
    partition: int,
    size: int,
    last: int,
    traces: Callable[[], Sequence[str | None]],
) -> _CM:
    """A collector batch of ``size`` events up to offset ``last``: a span continuing the
    first event's trace (linking the others' traces), its size and duration."""
    tracer, metrics = STATE.tracer, STATE.metrics
    if tracer is None and metrics is None:
        return NOOP
    saw(collector.store, topic, partition, last)
    group = collector.name
    attrs = {"messaging.consumer.group.name": group, "messaging.destination.name": topic}
    cm: _CM = NOOP
    if tracer is not None:
        texts = traces()
        cm = span(
            f"process {topic}",
            {
                **attrs,
                "messaging.operation.name": "process",
                "messaging.destination.partition.id": str(partition),
                "messaging.batch.message_count": size,
            },
            kind=tracing.CONSUMER,
            parent=first_of(texts),
            links_from=lambda: texts,
        )
    if metrics is None:
        return cm

    def done(seconds: float) -> None:
        metrics.process_duration.record(seconds, attrs)
        metrics.batch_size.record(size, attrs)
        metrics.processed.add(size, attrs)

    return _Measured(cm, done)


def handling(group: str, topic: str, offset: int, trace: str | None) -> _CM:
    """One handler call of a mapper or side effect, continuing the event's trace."""
    if STATE.tracer is None:
        return NOOP
    return span(
        f"handle {group}",
        {
            "messaging.consumer.group.name": group,
            "messaging.destination.name": topic,
            "reventless.offset": offset,
        },
        parent=trace,
    )


def sending(group: str, command: str, target: str) -> _CM:
    """A mapper's command to ``target`` (the command's own span is its child)."""
    if STATE.tracer is None:
        return NOOP
    return span(
        f"send {command}",
        {
            "messaging.consumer.group.name": group,
            "reventless.command": command,
            "reventless.topic": target,
        },
        kind=tracing.PRODUCER,
    )


# -- dead letters, schedules, gateway, rebuilds -------------------------------------------


def dead_lettered(group: str, topic: str, count: int, error: str = "") -> None:
    """``count`` events of ``topic`` were dead-lettered by ``group``."""
    if not count:
        return
    if STATE.metrics is not None:
        STATE.metrics.dead_letters.add(
            count, {"messaging.consumer.group.name": group, "messaging.destination.name": topic}
        )
    tracing.event("dead_letter", {"reventless.count": count})
    log.warning(
        "collector %s dead-lettered %d event(s) of %s%s",
        group,
        count,
        topic,
        f": {error}" if error else "",
        extra=fields(group, topic=topic),
    )


def redriven(group: str, resolved: int, failed: int) -> None:
    """A redrive of ``group``'s dead letters finished."""
    if STATE.metrics is not None:
        attrs = {"messaging.consumer.group.name": group}
        STATE.metrics.redrives.add(resolved, {**attrs, "reventless.outcome": "resolved"})
        STATE.metrics.redrives.add(failed, {**attrs, "reventless.outcome": "failed"})
    if resolved or failed:
        log.info(
            "collector %s redrive: %d resolved, %d still failing",
            group,
            resolved,
            failed,
            extra=fields(group),
        )


def firing(command: str, target: str, late_seconds: float, trace: str | None = None) -> _CM:
    """A scheduled command fires ``late_seconds`` after it was due."""
    if STATE.metrics is not None:
        attrs = {"reventless.topic": target}
        STATE.metrics.lateness.record(max(0.0, late_seconds), attrs)
        STATE.metrics.fired.add(1, attrs)
    if STATE.tracer is None:
        return NOOP
    return span(
        f"fire {command}",
        {
            "reventless.command": command,
            "reventless.topic": target,
            "reventless.lateness_s": late_seconds,
        },
        parent=trace,
    )


def sse(fn: Callable[P, AsyncIterator[str]]) -> Callable[P, AsyncIterator[str]]:
    """Decorate an SSE frame generator: open streams and frames sent are counted."""

    @functools.wraps(fn)
    async def counted(*args: P.args, **kwargs: P.kwargs) -> AsyncIterator[str]:
        metrics = STATE.metrics
        if metrics is not None:
            metrics.streams.add(1)
        try:
            async with contextlib.aclosing(fn(*args, **kwargs)) as texts:  # type: ignore[type-var]
                async for text in texts:
                    if metrics is not None:
                        metrics.frames.add(text.count("\n\n"))
                    yield text
        finally:
            if metrics is not None:
                metrics.streams.add(-1)

    return counted


class _Stages:
    """A rebuild's stages, one after the other: each progress message starts the next
    stage (named by its first word) and ends the one before."""

    def __init__(self, model: str, progress: Callable[[str], None] | None) -> None:
        self.model, self.progress = model, progress
        self.current: tuple[str, float, Any] | None = None

    def say(self, message: str) -> None:
        self.end()
        name = message.split(" ", 1)[0]
        tracer = STATE.tracer
        sp = None
        if tracer is not None:
            sp = tracer.start_span(
                f"rebuild {self.model} {name}",
                attributes={"reventless.model": self.model, "reventless.stage": name},
            )
        self.current = (name, time.perf_counter(), sp)
        if self.progress is not None:
            self.progress(message)

    def end(self) -> None:
        if self.current is None:
            return
        name, t0, sp = self.current
        self.current = None
        if sp is not None:
            sp.end()
        if STATE.metrics is not None:
            STATE.metrics.rebuild_duration.record(
                time.perf_counter() - t0, {"reventless.model": self.model, "reventless.stage": name}
            )


def rebuilds(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Decorate a rebuild ``fn(model, ..., progress=...)``: a span for the rebuild and
    one per stage (its progress messages mark them), with their durations."""

    @functools.wraps(fn)
    async def traced(*args: P.args, **kwargs: P.kwargs) -> T:
        if STATE.tracer is None and STATE.metrics is None:
            return await fn(*args, **kwargs)
        model = str(getattr(args[0], "name", args[0]))
        stages = _Stages(model, kwargs.get("progress"))  # type: ignore[arg-type]
        kwargs["progress"] = stages.say
        with span(f"rebuild {model}", {"reventless.model": model}):
            try:
                return await fn(*args, **kwargs)
            finally:
                stages.end()

    return traced


def watch_relay(relay: Backlogged) -> None:
    """Observe ``relay``'s backlog while it lives."""
    if STATE.metrics is not None:
        STATE.metrics.relays.add(relay)


def watch_collector(collector: Lagging) -> None:
    """Observe ``collector``'s lag while it lives."""
    if STATE.metrics is not None:
        STATE.metrics.collectors.add(collector)


__all__ = [
    "appending",
    "batch",
    "command",
    "dead_lettered",
    "firing",
    "handling",
    "publish",
    "rebuilds",
    "receiving",
    "redriven",
    "retried",
    "sending",
    "sse",
    "watch_collector",
    "watch_relay",
]
