"""The metrics in the Prometheus text format (the gateway's ``/metrics``; extra ``prometheus``).

Without a meter provider of the application's own, ``enable_prometheus`` (or the first
``prometheus_text``) gives reventless an SDK ``MeterProvider`` whose only reader is a
``PrometheusMetricReader`` on a registry of its own. With the application's provider,
the text is ``prometheus_client``'s default registry, where a ``PrometheusMetricReader``
the application attached registers itself.

Example::

    body, content_type = rv.telemetry.prometheus_text()
"""

from __future__ import annotations

from typing import Any

from .state import GLOBAL, STATE, available, configure, warn_once

_TEXT = "text/plain; version=0.0.4; charset=utf-8"
_OWN: dict[str, Any] = {}


def enable_prometheus() -> bool:
    """Record reventless's metrics for ``prometheus_text`` from now on (idempotent); False
    if the ``prometheus`` extra is missing or metrics were turned off (``configure``)."""
    if "registry" in _OWN:
        return True
    if STATE.metrics is not None:
        return True  # the application's provider: its readers decide
    if not available() or STATE.pinned_meters is None:
        return False
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from prometheus_client import CollectorRegistry
    except ImportError:
        warn_once(
            "prometheus",
            "metrics for /metrics need the prometheus extra: pip install 'reventless[prometheus]'",
        )
        return False
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    _OWN["registry"], _OWN["provider"] = registry, provider
    tracer = STATE.pinned_tracer
    configure(tracer_provider=tracer if tracer is not GLOBAL else GLOBAL, meter_provider=provider)
    return True


def prometheus_text() -> tuple[bytes, str]:
    """The current metrics as a Prometheus scrape body and its content type.

    Example::

        body, content_type = prometheus_text()
        assert content_type.startswith("text/plain")
    """
    if not enable_prometheus() and not available():
        return b"# reventless: metrics need the otel and prometheus extras\n", _TEXT
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        return b"# reventless: metrics need the prometheus extra\n", _TEXT
    registry = _OWN.get("registry", REGISTRY)
    return generate_latest(registry), CONTENT_TYPE_LATEST


__all__ = ["enable_prometheus", "prometheus_text"]
