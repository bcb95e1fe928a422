"""Which OpenTelemetry providers reventless reports to: decided once and cached.

The hooks read ``STATE.tracer`` and ``STATE.metrics``; ``None`` means off and costs one
attribute read. Off is the default: without the OpenTelemetry API, and when no SDK
provider was installed globally (``trace.set_tracer_provider``) nor passed to
``configure``. ``refresh`` (the App calls it on start) looks at the global providers again.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from .metering import SCOPE, Instruments

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

try:
    from opentelemetry import metrics as metrics_api
    from opentelemetry import trace as trace_api
except ImportError:  # the otel extra is not installed: every hook is a no-op
    metrics_api = None  # type: ignore[assignment]
    trace_api = None  # type: ignore[assignment]

log = logging.getLogger("reventless.telemetry")

#: Passed to ``configure``: use the global provider (``trace.get_tracer_provider()``).
GLOBAL: Any = object()


class State:
    """The cached decision of the hooks (module singleton ``STATE``)."""

    __slots__ = ("metrics", "pinned_meters", "pinned_tracer", "tracer", "warned")

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.metrics: Instruments | None = None
        self.pinned_tracer: Any = GLOBAL
        self.pinned_meters: Any = GLOBAL
        #: Problems already logged (each is logged once per process).
        self.warned: set[str] = set()


STATE = State()


def available() -> bool:
    """True if the OpenTelemetry API (the ``otel`` extra) is installed."""
    return trace_api is not None


def warn_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` at WARNING the first time ``key`` is seen in this process."""
    if key in STATE.warned:
        return
    STATE.warned.add(key)
    log.warning(message, *args, extra={"component": "telemetry"})


def _disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _real_tracer_provider(provider: Any) -> bool:
    assert trace_api is not None
    return not isinstance(provider, trace_api.ProxyTracerProvider | trace_api.NoOpTracerProvider)


def _real_meter_provider(provider: Any) -> bool:
    assert metrics_api is not None
    # the API's stand-in before a provider is set is private (_ProxyMeterProvider)
    return not isinstance(provider, metrics_api.NoOpMeterProvider) and not type(
        provider
    ).__name__.startswith("_Proxy")


def refresh() -> None:
    """Decide again which providers the hooks report to (after providers changed)."""
    if trace_api is None or metrics_api is None or _disabled():
        STATE.tracer, STATE.metrics = None, None
        return
    # A no-op provider records nothing: the hooks treat it as off (no per-call cost).
    tp = STATE.pinned_tracer
    if tp is GLOBAL:
        tp = trace_api.get_tracer_provider()
    tp = tp if tp is not None and _real_tracer_provider(tp) else None
    STATE.tracer = None if tp is None else tp.get_tracer(SCOPE)
    mp = STATE.pinned_meters
    if mp is GLOBAL:
        mp = metrics_api.get_meter_provider()
    mp = mp if mp is not None and _real_meter_provider(mp) else None
    if mp is None:
        STATE.metrics = None
    elif STATE.metrics is None or STATE.metrics.provider is not mp:
        STATE.metrics = Instruments(mp)


def configure(
    *,
    tracer_provider: TracerProvider | None = GLOBAL,
    meter_provider: MeterProvider | None = GLOBAL,
) -> None:
    """Report traces and metrics to these providers (None: off; the default: the global
    providers, looked at again on each ``refresh``).

    Example::

        from opentelemetry.sdk.trace import TracerProvider
        rv.telemetry.configure(tracer_provider=TracerProvider(), meter_provider=None)
    """
    STATE.pinned_tracer, STATE.pinned_meters = tracer_provider, meter_provider
    refresh()


def tracing() -> bool:
    """True if spans are being recorded."""
    return STATE.tracer is not None


__all__ = [
    "GLOBAL",
    "SCOPE",
    "STATE",
    "available",
    "configure",
    "metrics_api",
    "refresh",
    "trace_api",
    "tracing",
    "warn_once",
]
