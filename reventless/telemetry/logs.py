"""Structured log fields: what reventless passes as ``extra=`` on its log records.

Every record reventless logs at a point of interest (start and stop, retries, dead
letters, failovers, errors; never one per event) carries the same attributes, so a JSON
formatter or a ``%(trace_id)s`` format string can rely on them: ``component``,
``topic``, ``partition``, ``offset``, ``trace_id`` and ``span_id`` (None when unknown).

Example::

    log.warning("publishing failed: %s", exc, extra=telemetry.fields("relay", topic="Order"))
"""

from __future__ import annotations

from typing import Any

from .tracing import ids


def fields(
    component: str,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> dict[str, Any]:
    """The ``extra=`` of a log record about ``component`` (with the current trace)."""
    trace_id, span_id = ids()
    return {
        "component": component,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "trace_id": trace_id,
        "span_id": span_id,
    }


__all__ = ["fields"]
