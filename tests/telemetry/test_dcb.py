"""A DCB decision is a command span: its append an event on it, a conditional-append clash
a retry (an event, a count, one log line), and the events it stores carry its trace."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import reventless as rv
from examples.dcb.courses import EVENTS, DefineCourse, StudentSubscribed, SubscribeStudent, courses
from reventless import telemetry
from reventless.dcb.execute import execute
from reventless.store.append import AppendResult
from tests.telemetry.conftest import _PROVIDER, by_name, parent_of, points

NO_WAIT = rv.DecideOptions(max_attempts=3, backoff_base=0.0, backoff_max=0.0)


def _tp(span: ReadableSpan) -> str:
    c = span.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


def course_app(url: str) -> tuple[rv.App, rv.DcbLog]:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=EVENTS)
    log.include(courses)
    return app, log


class Raced:
    """A DCB log whose first read is followed by another writer's append (another App on
    the same store) of an event the decision's query matches: its append then clashes."""

    def __init__(self, log: rv.DcbLog, other: rv.DcbLog, competing: rv.Event) -> None:
        self.log, self.other, self.name = log, other, log.name
        self.competing: list[rv.Event] = [competing]

    @property
    def store(self) -> Any:
        return self.log.store

    @property
    def schema(self) -> Any:
        return self.log.schema

    async def landed(self, command_id: str | None) -> Any:
        return await self.log.landed(command_id)

    async def read(self, query: rv.Query, *, after: int = 0) -> list[rv.Envelope[Any]]:
        envs = await self.log.read(query, after=after)
        if self.competing:  # outside the decision's context, as another process would
            append = self.other.append([self.competing.pop()])
            await asyncio.create_task(append, context=contextvars.Context())
        return envs

    async def append(
        self,
        events: Sequence[rv.Event],
        *,
        condition: rv.AppendCondition | None = None,
        tags: Any = None,
        meta: rv.Metadata | None = None,
        command_id: str | None = None,
    ) -> AppendResult:
        return await self.log.append(
            events, condition=condition, tags=tags, meta=meta, command_id=command_id
        )


async def test_a_decision_is_a_command_span_and_its_events_carry_its_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app, log = course_app(f"sqlite:///{tmp_path / 'a.db'}")
    async with app:
        await log.execute(DefineCourse(course_id="c1", capacity=2))
        with telemetry.span("request"):
            await log.execute(SubscribeStudent(student_id="s1", course_id="c1"))
        stored = await log.read(rv.Query.all())
    s = by_name(spans.get_finished_spans())
    define, subscribe = s["execute DefineCourse"], s["execute SubscribeStudent"]
    assert parent_of(define) is None
    assert parent_of(subscribe) == s["request"].context.span_id
    assert subscribe.attributes == {"reventless.topic": "courses"}  # no aggregate id
    [append] = subscribe.events
    assert append.name == "append" and append.attributes is not None
    assert append.attributes["reventless.events"] == 1
    assert "append courses" not in s  # inside a decision: no span of its own
    assert [e.trace for e in stored] == [_tp(define), _tp(subscribe)]


async def test_a_clash_on_the_append_condition_is_a_retry_a_count_and_one_line(
    tmp_path: Path, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=_PROVIDER, meter_provider=meters)
    caplog.set_level(logging.INFO, logger="reventless")
    url = f"sqlite:///{tmp_path / 'a.db'}"
    (a, log), (b, other) = course_app(url), course_app(url)
    async with a, b:
        await log.execute(DefineCourse(course_id="c1", capacity=2))
        raced = Raced(log, other, StudentSubscribed(student_id="s2", course_id="c1"))
        cmd = SubscribeStudent(student_id="s1", course_id="c1")
        res = await execute(raced, log.decider, cmd, options=NO_WAIT)
        stored = await log.read(rv.Query.all())
    meters.shutdown()
    assert res.attempts == 2 and res.last_offset == 3
    subscribe = by_name(spans.get_finished_spans())["execute SubscribeStudent"]
    assert [e.name for e in subscribe.events] == ["append", "retry", "append"]
    failed, retry, landed = subscribe.events
    assert failed.attributes is not None and retry.attributes is not None
    assert failed.attributes["error.type"] == "AppendConditionError"
    assert retry.attributes["reventless.attempt"] == 1
    assert landed.attributes is not None and "error.type" not in landed.attributes
    assert stored[-1].trace == _tp(subscribe)
    assert stored[-2].trace is None  # the other writer's, outside any span
    [line] = [r for r in caplog.records if "clashed with another writer" in r.getMessage()]
    assert line.component == "dcb" and line.topic == "courses"  # type: ignore[attr-defined]
    assert line.trace_id == f"{subscribe.context.trace_id:032x}"  # type: ignore[attr-defined]
    got = points(reader)
    [(attrs, retries)] = got["reventless.command.retries"]
    assert attrs == {"db.collection.name": "courses"} and retries.value == 1
    appended = sum(p.value for _, p in got["reventless.events.appended"])
    assert appended == 3  # the course, the competing event, the retried decision's event
    [(attrs, durations)] = got["db.client.operation.duration"]
    assert attrs == {
        "db.operation.name": "append",
        "db.collection.name": "courses",
        "db.system.name": "sqlite",
    }
    assert durations.count == 3  # the clashing append is not a completed one
