"""Exporters from the standard OpenTelemetry environment variables.

``setup_from_env`` reads ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``) and
``OTEL_METRICS_EXPORTER`` (``otlp``, ``prometheus``, ``console``, ``none``); the OTLP
exporter (``opentelemetry-exporter-otlp-proto-http``) reads its own
``OTEL_EXPORTER_OTLP_*`` settings. An unknown exporter name, a missing package or an
endpoint that cannot be reached is logged once and never fails a command or a delivery:
spans and metrics are exported from background threads.

Example::

    OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 python app.py
    # in app.py, before the App starts:
    rv.telemetry.setup_from_env()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .state import available, configure, warn_once

_TRACES = ("otlp", "console", "none")
_METRICS = ("otlp", "prometheus", "console", "none")


class _FirstOnly(logging.Filter):
    """Let one record of a chatty exporter logger through (an unreachable endpoint would
    otherwise log every export attempt)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.seen:
            return False
        self.seen = True
        return True


def _quiet(logger: str) -> None:
    lg = logging.getLogger(logger)
    if not any(isinstance(f, _FirstOnly) for f in lg.filters):
        lg.addFilter(_FirstOnly())


def _names(value: str, known: Sequence[str], what: str) -> list[str]:
    out = []
    for name in (n.strip().lower() for n in value.split(",")):
        if not name:
            continue
        if name not in known:
            warn_once(
                f"{what}:{name}",
                "unknown %s exporter %r in the environment (known: %s): ignored",
                what,
                name,
                ", ".join(known),
            )
            continue
        out.append(name)
    return out


def _span_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        warn_once("otlp", "the otlp exporter needs opentelemetry-exporter-otlp-proto-http")
        return None
    _quiet("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    _quiet("opentelemetry.exporter.otlp.proto.http._common")
    return _Reported(OTLPSpanExporter(), "traces")


def _metric_reader(name: str) -> Any:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return PeriodicExportingMetricReader(ConsoleMetricExporter())
    if name == "prometheus":
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
        except ImportError:
            warn_once("prometheus", "the prometheus exporter needs the prometheus extra")
            return None
        return PrometheusMetricReader()
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        warn_once("otlp", "the otlp exporter needs opentelemetry-exporter-otlp-proto-http")
        return None
    _quiet("opentelemetry.exporter.otlp.proto.http.metric_exporter")
    _quiet("opentelemetry.exporter.otlp.proto.http._common")
    return PeriodicExportingMetricReader(OTLPMetricExporter())


class _Reported:
    """A span exporter whose failures (an unreachable endpoint) are logged once."""

    def __init__(self, inner: Any, what: str) -> None:
        self.inner, self.what = inner, what

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter must not take the export thread down
            result = SpanExportResult.FAILURE
            warn_once(f"export:{self.what}", "exporting %s failed: %s", self.what, exc)
        if result is not SpanExportResult.SUCCESS:
            warn_once(
                f"export:{self.what}",
                "exporting %s failed (the collector endpoint may be unreachable); "
                "commands go on, the spans are dropped",
                self.what,
            )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))


def setup_from_env(environ: Mapping[str, str] | None = None) -> tuple[Any, Any]:
    """Give reventless SDK providers exporting as the environment says; returns the
    (tracer provider, meter provider), None where nothing is exported. Without the
    OpenTelemetry SDK it logs once and changes nothing."""
    env = os.environ if environ is None else environ
    traces = _names(env.get("OTEL_TRACES_EXPORTER", ""), _TRACES, "traces")
    metrics = _names(env.get("OTEL_METRICS_EXPORTER", ""), _METRICS, "metrics")
    traces = [n for n in traces if n != "none"]
    metrics = [n for n in metrics if n != "none"]
    if not traces and not metrics:
        return None, None
    if not available():
        warn_once("api", "OTEL_*_EXPORTER is set but the otel extra is not installed")
        return None, None
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        warn_once("sdk", "OTEL_*_EXPORTER is set but opentelemetry-sdk is not installed")
        return None, None
    tp = None
    exporters = [e for e in map(_span_exporter, traces) if e is not None]
    if exporters:
        tp = TracerProvider()
        for e in exporters:
            tp.add_span_processor(BatchSpanProcessor(e))
    mp = None
    readers = [r for r in map(_metric_reader, metrics) if r is not None]
    if readers:
        mp = MeterProvider(metric_readers=readers)
    configure(tracer_provider=tp, meter_provider=mp)
    return tp, mp


__all__ = ["setup_from_env"]
