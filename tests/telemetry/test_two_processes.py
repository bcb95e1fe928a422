"""One trace across two processes: this one executes a command and its relay publishes
through a real broker (JetStream; SNS/SQS on moto); a worker process receives it, runs a
mapper and executes the next command. The context travels in the broker headers (NATS
headers, SQS message attributes) and in the stored events."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import reventless as rv
from tests.moto_server import MotoServer, aws_url
from tests.moto_server import require_adapter as require_aws
from tests.nats_server import require_adapter as require_nats
from tests.telemetry.conftest import by_name, parent_of
from tests.telemetry.model import Counter, Increment

ROOT = Path(__file__).resolve().parents[2]


async def _across(store: str, broker: str, spans: InMemorySpanExporter) -> None:
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.telemetry.worker",
        store,
        broker,
        "1",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    assert worker.stdout is not None
    try:
        async with asyncio.timeout(60):
            assert (await worker.stdout.readline()).strip() == b"ready"
            app = rv.App(store=store, broker=broker)
            counters = app.event_log(Counter)
            async with app:
                await counters.execute("c-1", Increment(by=3))
            theirs: list[dict[str, Any]] = json.loads(await worker.stdout.readline())
            assert await worker.wait() == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    ours = by_name(spans.get_finished_spans())
    command, publish = ours["execute Increment"], ours["publish Counter"]
    trace = command.context.trace_id
    assert {s["trace_id"] for s in theirs} == {trace}, theirs
    assert parent_of(publish) == command.context.span_id
    t = {s["name"]: s for s in theirs}
    assert t["receive Counter"]["parent"] == publish.context.span_id  # via the headers
    assert t["process Counter"]["parent"] == command.context.span_id  # via the stored event
    assert t["handle to_ledger"]["parent"] == command.context.span_id
    assert t["send Note"]["parent"] == t["handle to_ledger"]["span_id"]
    assert t["execute Note"]["parent"] == t["send Note"]["span_id"]


@pytest.mark.nats
async def test_one_trace_through_jetstream(
    tmp_path: Path, nats_url: str, spans: InMemorySpanExporter
) -> None:
    require_nats()
    await _across(f"sqlite:///{tmp_path / 'shared.db'}", nats_url, spans)


@pytest.mark.aws
async def test_one_trace_through_sns_sqs(
    tmp_path: Path, moto_server: MotoServer, spans: InMemorySpanExporter
) -> None:
    require_aws()
    await _across(f"sqlite:///{tmp_path / 'shared.db'}", aws_url(moto_server), spans)
