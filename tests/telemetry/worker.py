"""The second process of the cross-process trace tests.

``python -m tests.telemetry.worker STORE BROKER N``: runs the mapper Counter -> Ledger
on the shared store and broker with an in-memory span exporter, prints ``ready`` once
its collector is subscribed, waits until the Ledger holds ``N`` events, then prints its
finished spans as one JSON line and exits.
"""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import reventless as rv
from reventless import telemetry
from tests.telemetry.model import Counter, Ledger, to_ledger


async def main(store: str, broker: str, n: int) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(tracer_provider=provider, meter_provider=None)
    app = rv.App(store=store, broker=broker)
    app.event_log(Counter)
    ledger = app.event_log(Ledger)
    app.collect(to_ledger)
    async with app:
        print("ready", flush=True)
        async with asyncio.timeout(60):
            while await ledger.head() < n:
                await asyncio.sleep(0.02)
    spans = [
        {
            "name": s.name,
            "trace_id": s.context.trace_id,
            "span_id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]
    print(json.dumps(spans), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
