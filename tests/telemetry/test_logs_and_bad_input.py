"""Structured log records, and bad telemetry input: malformed trace contexts in a message
or in the log, unknown exporters, an unreachable collector endpoint. Each is logged once
and fails no command and no delivery."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import reventless as rv
from reventless import telemetry
from reventless.broker.memory import InMemoryBroker
from reventless.telemetry.state import STATE
from tests.model import totals
from tests.services import free_port
from tests.telemetry.model import Counter, Increment, chain_app, failing

FIELDS = ("component", "topic", "partition", "offset", "trace_id", "span_id")


def _warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if needle in r.getMessage()]


async def test_a_dead_letter_is_one_structured_line_in_its_trace(
    tmp_path: Path, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reventless")
    app = rv.App(store=f"sqlite:///{tmp_path / 'a.db'}")
    counters = app.event_log(Counter)
    app.collect(failing)
    app.collect(totals)
    async with app:
        # held while the commands run: a loaded machine would otherwise deliver each
        # event in a batch of its own (one line per batch is then one per event)
        app.collector("always_fails").pause()
        for i in range(30):
            await counters.execute(f"c-{i % 3}", Increment(by=1))
        app.collector("always_fails").resume()
        await app.settle()
    lines = _warnings(caplog, "dead-lettered")
    assert len(lines) >= 1  # one per batch, not one per event of the topic
    assert sum(int(r.getMessage().split()[3]) for r in lines) == 30
    rec = lines[0]
    assert all(hasattr(rec, f) for f in FIELDS)
    assert rec.component == "always_fails" and rec.topic == "Counter"  # type: ignore[attr-defined]
    traces = {f"{s.context.trace_id:032x}" for s in spans.get_finished_spans()}
    assert rec.trace_id in traces  # type: ignore[attr-defined]
    started = _warnings(caplog, "app started")
    assert len(started) == 1 and started[0].component == "app"  # type: ignore[attr-defined]
    assert len(_warnings(caplog, "app stopped")) == 1
    # no line per event in the hot path: 30 commands, 60 deliveries
    assert len(caplog.records) < 30


@pytest.fixture
def _reset() -> Iterator[None]:
    yield
    telemetry.configure()
    STATE.warned.clear()


def _provider_for_test() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    STATE.warned.clear()
    telemetry.configure(tracer_provider=TracerProvider(), meter_provider=None)


class Tampering(InMemoryBroker):
    """The in-memory broker, but every message arrives with a broken trace context."""

    async def publish(self, messages: Sequence[rv.Message]) -> None:
        bad = {"traceparent": "00-not-a-trace-01", "tracestate": "x"}
        await super().publish(
            [dataclasses.replace(m, headers={**m.headers, **bad}) for m in messages]
        )


async def test_a_malformed_trace_context_in_a_message_is_logged_once(
    tmp_path: Path, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}", broker=Tampering())
    async with app:
        for i in range(5):
            await app.event_log(Counter).execute(f"c-{i}", Increment(by=1))
            await app.settle()
        assert app.collector("counter_totals").processed == 5  # every delivery went through
    assert len(_warnings(caplog, "malformed trace context")) == 1
    receive = [s for s in spans.get_finished_spans() if s.name == "receive Counter"]
    assert receive and all(s.parent is None for s in receive)  # a new root, not a failure


@pytest.mark.usefixtures("_reset")
async def test_a_malformed_trace_context_in_the_log_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "a.db"
    app = rv.App(store=f"sqlite:///{db}")
    log = app.event_log(Counter)
    async with app:
        for i in range(4):
            await log.execute(f"c-{i}", Increment(by=1))
    with sqlite3.connect(db) as conn:
        (table,) = conn.execute("SELECT table_name FROM rv_topics").fetchone()
        conn.execute(f"UPDATE \"{table}\" SET _trace = '00-garbage'")
    _provider_for_test()
    app = rv.App(store=f"sqlite:///{db}")
    app.event_log(Counter)
    view = app.collect(totals)
    app.collect(failing)
    async with app:
        await app.settle()
        assert len(await view.all()) == 4  # caught up from the store, handlers ran
    assert len(_warnings(caplog, "malformed trace context")) == 1


@pytest.mark.usefixtures("_reset")
async def test_unknown_exporters_are_logged_once_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"OTEL_TRACES_EXPORTER": "zipkinish", "OTEL_METRICS_EXPORTER": "statsd,none"}
    assert telemetry.setup_from_env(env) == (None, None)
    assert telemetry.setup_from_env(env) == (None, None)
    assert len(_warnings(caplog, "unknown traces exporter 'zipkinish'")) == 1
    assert len(_warnings(caplog, "unknown metrics exporter 'statsd'")) == 1
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}")
    async with app:
        await app.event_log(Counter).execute("c-1", Increment(by=1))


@pytest.mark.usefixtures("_reset")
async def test_an_unreachable_collector_endpoint_fails_no_command(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    tp, mp = telemetry.setup_from_env({"OTEL_TRACES_EXPORTER": "otlp"})
    assert tp is not None and mp is None and telemetry.tracing()
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        async with app:
            for i in range(3):
                await app.event_log(Counter).execute(f"c-{i}", Increment(by=1))
            await app.settle()
            assert len(await app.event_log(Counter).read()) == 3
        tp.force_flush(5_000)
        await app.start()  # another round of spans, another failed export
        await app.event_log(Counter).execute("c-9", Increment(by=1))
        await app.stop()
        tp.force_flush(5_000)
    finally:
        tp.shutdown()
    assert len(_warnings(caplog, "exporting traces failed")) == 1


async def test_a_concurrency_clash_is_a_retry_event_a_count_and_one_line(
    tmp_path: Path, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from tests.telemetry.conftest import _PROVIDER, points

    reader = InMemoryMetricReader()
    telemetry.configure(tracer_provider=_PROVIDER, meter_provider=MeterProvider([reader]))
    caplog.set_level(logging.INFO, logger="reventless")
    url = f"sqlite:///{tmp_path / 'a.db'}"
    a, b = rv.App(store=url), rv.App(store=url)  # two writers of one store: they clash
    logs = [a.event_log(Counter), b.event_log(Counter)]
    async with a, b:
        for _ in range(50):  # until the writers have clashed at least once
            await asyncio.gather(*(logs[i % 2].execute("c-1", Increment(by=1)) for i in range(8)))
            if _warnings(caplog, "clashed with another writer"):
                break
    [line, *_] = _warnings(caplog, "clashed with another writer")
    assert line.component == "eventlog" and line.topic == "Counter"  # type: ignore[attr-defined]
    assert line.trace_id is not None  # type: ignore[attr-defined]
    retried = [s for s in spans.get_finished_spans() if any(e.name == "retry" for e in s.events)]
    assert retried and all(s.name == "execute Increment" for s in retried)
    [(_, point)] = points(reader)["reventless.command.retries"]
    assert point.value >= 1
