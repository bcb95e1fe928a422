"""Spans and the W3C trace context that links them across processes.

A command's span context is stored with each event it appends (the ``_trace`` metadata
column: ``traceparent``, then a space and ``tracestate`` if there is one) and travels
in the headers of the broker message that carries the event (``traceparent``,
``tracestate``). A collector's batch, handler and sent command continue the trace of
the event they handle, so one trace runs command -> event -> read model / mapper ->
next command, across processes. A malformed context is logged once and ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .state import STATE, trace_api, warn_once

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, Tracer

#: A shared, reusable no-op context manager: what every span hook returns when off.
NOOP: contextlib.nullcontext[None] = contextlib.nullcontext()
#: Longest context text taken from a message or a stored event (traceparent is 55).
_MAX_TEXT = 600
#: Distinct event traces linked from one span (a batch of many commands' events).
MAX_LINKS = 32
_CACHE: dict[str, Context | None] = {}
_CACHE_SIZE = 512

if trace_api is not None:
    from opentelemetry.context import attach as _attach
    from opentelemetry.context import detach as _detach
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace import set_span_in_context as _in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR = TraceContextTextMapPropagator()
    INTERNAL, PRODUCER, CONSUMER, CLIENT = (
        SpanKind.INTERNAL,
        SpanKind.PRODUCER,
        SpanKind.CONSUMER,
        SpanKind.CLIENT,
    )


def traceparent() -> str | None:
    """The current span's context as stored with an event, or None (tracing off, no span).

    Example::

        with telemetry.span("work"):
            assert telemetry.traceparent().startswith("00-")
    """
    if STATE.tracer is None:
        return None
    assert trace_api is not None
    sc = trace_api.get_current_span().get_span_context()
    if not sc.is_valid:
        return None
    text = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{sc.trace_flags:02x}"
    state = sc.trace_state.to_header() if sc.trace_state else ""
    return f"{text} {state}" if state else text


def context_of(text: str | None) -> Context | None:
    """The span context in ``text`` (as ``traceparent`` stores it); None if there is none
    or it is malformed (logged once per process)."""
    if not text:
        return None
    try:
        return _CACHE[text]
    except KeyError:
        pass
    ctx = None
    parent, _, state = text.partition(" ")
    if len(text) <= _MAX_TEXT and trace_api is not None:
        carrier = {"traceparent": parent, "tracestate": state} if state else {"traceparent": parent}
        got = _PROPAGATOR.extract(carrier)
        if trace_api.get_current_span(got).get_span_context().is_valid:
            ctx = got
    if ctx is None:
        warn_once(
            "traceparent",
            "ignoring a malformed trace context %r (logged once; the event or message is "
            "processed without it)",
            text[:80],
        )
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[text] = ctx
    return ctx


def context_from_headers(headers: Mapping[str, str]) -> Context | None:
    """The span context a broker message's headers carry, if any."""
    parent = headers.get("traceparent")
    if not parent:
        return None
    state = headers.get("tracestate")
    return context_of(f"{parent} {state}" if state else parent)


def headers_of(text: str | None) -> dict[str, str]:
    """The message headers that carry ``text`` (a stored context)."""
    if not text:
        return {}
    parent, _, state = text.partition(" ")
    return {"traceparent": parent, "tracestate": state} if state else {"traceparent": parent}


def _links(texts: Iterable[str | None], skip: str | None) -> list[Link]:
    from opentelemetry.trace import Link

    out: list[Link] = []
    seen = {skip}
    for t in texts:
        if t in seen:
            continue
        seen.add(t)
        ctx = context_of(t)
        if ctx is not None:
            out.append(Link(trace_api.get_current_span(ctx).get_span_context()))
            if len(out) >= MAX_LINKS:
                break
    return out


class _Active:
    """A span started on entry and current inside the block: ``start_as_current_span``
    without its two generator-based context managers (the same exception handling),
    and links added only to a span that records (a sampled-out span skips building them).
    """

    __slots__ = ("_args", "_links", "_span", "_token", "_tracer")

    def __init__(
        self,
        tracer: Tracer,
        args: tuple[str, Context | None, Any, Mapping[str, Any] | None],
        links: tuple[Callable[[], Iterable[str | None]], str | None] | None,
    ) -> None:
        self._args, self._links = args, links
        self._span: Span | None = None
        self._token: object = None
        self._tracer = tracer

    def __enter__(self) -> Span:
        name, ctx, kind, attributes = self._args
        sp = self._span = self._tracer.start_span(
            name, context=ctx, kind=kind, attributes=attributes
        )
        if self._links is not None and sp.is_recording():
            texts, skip = self._links
            for link in _links(texts(), skip):
                sp.add_link(link.context)
        self._token = _attach(_in_context(sp))
        return sp

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        sp = self._span
        assert sp is not None
        _detach(self._token)  # type: ignore[arg-type]
        # as use_span: an Exception (not a GeneratorExit or a cancellation) is an error
        if isinstance(e, Exception) and sp.is_recording():
            sp.record_exception(e)
            sp.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
        sp.end()


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: Any = None,
    parent: str | None = None,
    links_from: Callable[[], Iterable[str | None]] | None = None,
) -> contextlib.AbstractContextManager[Span | None]:
    """A span around a block (``NOOP`` when tracing is off). ``parent`` is a stored
    context to continue (else the current span); ``links_from`` gives further contexts
    that the span links to (called only when the span records: tracing is on and the
    sampler kept it).

    Example::

        with telemetry.span("rebuild orders", {"reventless.stage": "read"}):
            ...
    """
    tracer = STATE.tracer
    if tracer is None:
        return NOOP
    ctx = context_of(parent) if parent else None
    links = (links_from, parent) if links_from is not None else None
    return _Active(tracer, (name, ctx, kind or INTERNAL, attributes), links)


def first_of(texts: Sequence[str | None]) -> str | None:
    """The first context among ``texts`` (a batch's parent)."""
    for t in texts:
        if t:
            return t
    return None


def current_span() -> Span | None:
    """The current span if there is one (tracing on and inside a span), recording or
    not (a span the sampler left out is valid and carries the trace on)."""
    if STATE.tracer is None:
        return None
    assert trace_api is not None
    current = trace_api.get_current_span()
    return current if current.get_span_context().is_valid else None


def event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Add an event to the current span (retries, decisions)."""
    if STATE.tracer is None:
        return
    assert trace_api is not None
    trace_api.get_current_span().add_event(name, attributes or {})


def ids() -> tuple[str | None, str | None]:
    """The current trace and span ids (hex), for log records; (None, None) when off."""
    if STATE.tracer is None:
        return None, None
    assert trace_api is not None
    sc = trace_api.get_current_span().get_span_context()
    if not sc.is_valid:
        return None, None
    return f"{sc.trace_id:032x}", f"{sc.span_id:016x}"


__all__ = [
    "MAX_LINKS",
    "NOOP",
    "context_from_headers",
    "context_of",
    "current_span",
    "event",
    "first_of",
    "headers_of",
    "ids",
    "span",
    "traceparent",
]
