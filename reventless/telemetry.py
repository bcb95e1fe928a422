"""Traces, metrics and structured logs through OpenTelemetry (the ``otel`` extra).

Without the OpenTelemetry API installed every hook here is a no-op.
"""
