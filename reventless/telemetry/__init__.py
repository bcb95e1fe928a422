"""Traces, metrics and structured logs through OpenTelemetry (the ``otel`` extra).

Without the OpenTelemetry API installed every hook here is a no-op, and so it is while
no SDK provider is set (globally, or through ``configure``): the hooks check a cached
decision and return a shared no-op. The App calls ``refresh`` when it starts.

Example::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())   # before the App starts
    async with app:                                # commands, publishes, batches: spans
        ...
    body, content_type = rv.telemetry.prometheus_text()
"""

from .env import setup_from_env
from .hooks import (
    appending,
    batch,
    command,
    dead_lettered,
    firing,
    handling,
    publish,
    rebuilds,
    receiving,
    redriven,
    retried,
    sending,
    sse,
    watch_collector,
    watch_relay,
)
from .logs import fields
from .metering import HEADS, saw
from .prometheus import enable_prometheus, prometheus_text
from .state import available, configure, refresh, tracing
from .tracing import NOOP, context_of, event, headers_of, ids, span, traceparent

__all__ = [
    "HEADS",
    "NOOP",
    "appending",
    "available",
    "batch",
    "command",
    "configure",
    "context_of",
    "dead_lettered",
    "enable_prometheus",
    "event",
    "fields",
    "firing",
    "handling",
    "headers_of",
    "ids",
    "prometheus_text",
    "publish",
    "rebuilds",
    "receiving",
    "redriven",
    "refresh",
    "retried",
    "saw",
    "sending",
    "setup_from_env",
    "span",
    "sse",
    "traceparent",
    "tracing",
    "watch_collector",
    "watch_relay",
]
