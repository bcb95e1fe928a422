"""Telemetry tests: an SDK tracer provider with an in-memory exporter and an in-memory
metric reader, handed to reventless through ``telemetry.configure`` (not the global
providers, which a process can set only once)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reventless import telemetry
from reventless.telemetry.state import STATE

_EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(_EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans are recorded (and metrics off) for the test; its finished spans."""
    _EXPORTER.clear()
    telemetry.configure(tracer_provider=_PROVIDER, meter_provider=None)
    yield _EXPORTER
    telemetry.configure()
    STATE.warned.clear()
    _EXPORTER.clear()


@pytest.fixture
def metrics() -> Iterator[InMemoryMetricReader]:
    """Metrics are recorded (and traces off) into a fresh reader for the test."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=None, meter_provider=provider)
    yield reader
    telemetry.configure()
    STATE.warned.clear()
    provider.shutdown()


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every metric's data points as (attributes, point) per metric name."""
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out.setdefault(m.name, []).extend(
                    (dict(p.attributes or {}), p) for p in m.data.data_points
                )
    return out


def by_name(finished: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    """The spans by name (the last of a name wins)."""
    return {s.name: s for s in finished}


def parent_of(s: ReadableSpan) -> int | None:
    """The span id of ``s``'s parent (None for a root)."""
    return s.parent.span_id if s.parent is not None else None
