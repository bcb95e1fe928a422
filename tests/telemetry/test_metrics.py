"""Metrics through the OpenTelemetry SDK's in-memory reader: names, units, attributes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import reventless as rv
from reventless import telemetry
from tests.schedule.model import EXPIRY, START, Order, Place
from tests.telemetry.conftest import points
from tests.telemetry.model import Counter, Increment, chain_app, failing

ROOT = Path(__file__).resolve().parents[2]


def _sum(reader: InMemoryMetricReader, name: str, **attrs: Any) -> float:
    got = points(reader).get(name, [])
    assert got, f"no {name}"
    total = 0.0
    for a, p in got:
        if all(a.get(k) == v for k, v in attrs.items()):
            total += p.count if hasattr(p, "count") and hasattr(p, "bucket_counts") else p.value
    return total


async def test_appends_publishes_batches_and_lag(
    tmp_path: Path, metrics: InMemoryMetricReader
) -> None:
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}", mapper=False)
    counters = app.event_log(Counter)
    async with app:
        await counters.execute_many([(f"c-{i}", Increment(by=1)) for i in range(5)])
        await app.settle()
        # a paused collector falls behind: its lag is the newest offset minus its checkpoint
        totals = app.collector("counter_totals")
        totals.pause()
        await counters.execute("c-9", Increment(by=1))
        lagging = {"messaging.consumer.group.name": "counter_totals"}
        for _ in range(200):
            if _sum(metrics, "reventless.collector.lag", **lagging) == 1:
                break
            await asyncio.sleep(0.01)
        assert _sum(metrics, "reventless.collector.lag", **lagging) == 1
        totals.resume()
        await app.settle()
        assert _sum(metrics, "reventless.collector.lag", **lagging) == 0
    got = points(metrics)
    [(attrs, _)] = [
        x for x in got["db.client.operation.duration"] if x[0]["db.collection.name"] == "Counter"
    ]
    assert attrs == {
        "db.operation.name": "append",
        "db.collection.name": "Counter",
        "db.system.name": "sqlite",
    }
    assert _sum(metrics, "db.client.operation.duration", **{"db.collection.name": "Counter"}) >= 1
    assert _sum(metrics, "reventless.events.appended", **{"db.collection.name": "Counter"}) == 6
    assert _sum(metrics, "messaging.client.sent.messages") >= 2
    assert _sum(metrics, "messaging.client.operation.duration") >= 2
    assert _sum(metrics, "messaging.client.consumed.messages", **lagging) >= 2
    assert _sum(metrics, "reventless.collector.events", **lagging) == 6
    assert _sum(metrics, "messaging.process.duration", **lagging) >= 2
    assert _sum(metrics, "reventless.collector.batch.size", **lagging) >= 2
    assert _sum(metrics, "reventless.relay.backlog") == 0
    units = {
        m.name: m.unit
        for rm in metrics.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert units["db.client.operation.duration"] == "s"
    assert units["messaging.process.duration"] == "s"
    assert units["reventless.collector.lag"] == "{event}"


async def test_dead_letters_and_redrives_are_counted(
    tmp_path: Path, metrics: InMemoryMetricReader
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 'a.db'}")
    counters = app.event_log(Counter)
    handle = app.collect(failing)
    async with app:
        await counters.execute("c-1", Increment(by=1))
        await app.settle()
        assert len(await handle.dead_letters()) == 1
        await handle.redrive()
    group = {"messaging.consumer.group.name": "always_fails"}
    assert _sum(metrics, "reventless.collector.dead_letters", **group) == 1
    assert (
        _sum(metrics, "reventless.collector.redrives", **group, **{"reventless.outcome": "failed"})
        == 1
    )


async def test_schedule_lateness(tmp_path: Path, metrics: InMemoryMetricReader) -> None:
    clock = rv.ManualClock(START)
    app = rv.App(store=f"sqlite:///{tmp_path / 'a.db'}", options=rv.AppOptions(clock=clock))
    orders = app.event_log(Order)
    async with app:
        await orders.execute("o-1", Place(total=1))
        [fired] = await app.scheduler.advance(EXPIRY + timedelta(seconds=90))
        assert fired.fired
    [(attrs, point)] = points(metrics)["reventless.schedule.lateness"]
    assert attrs == {"reventless.topic": "Order"}
    assert point.count == 1 and 89 <= point.sum <= 91  # fired 90 s after it was due


async def test_sse_streams_and_frames(metrics: InMemoryMetricReader) -> None:
    @telemetry.sse
    async def frames(n: int) -> AsyncIterator[str]:
        yield "retry: 1000\n\n"
        yield "id: 1\nevent: event\ndata: {}\n\n" * n

    async for _ in frames(3):
        assert _sum(metrics, "reventless.gateway.streams") == 1
    assert _sum(metrics, "reventless.gateway.streams") == 0
    assert _sum(metrics, "reventless.gateway.frames") == 4


def test_prometheus_text_renders_the_metrics(tmp_path: Path) -> None:
    # a process of its own: the scrape registry is process-wide
    script = f"""
import asyncio, json
import reventless as rv
from reventless import telemetry
from tests.model import Counter, Increment
assert telemetry.enable_prometheus()
async def main():
    app = rv.App(store="sqlite:///{tmp_path / "p.db"}")
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment(by=1))
asyncio.run(main())
body, ctype = telemetry.prometheus_text()
print(json.dumps([body.decode(), ctype]))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    body, ctype = json.loads(out.stdout.splitlines()[-1])
    assert ctype.startswith("text/plain")
    assert "db_client_operation_duration_seconds_count{" in body
    assert 'db_collection_name="Counter"' in body
    assert "reventless_events_appended" in body
