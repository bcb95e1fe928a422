"""One trace runs command -> stored event -> relay publish -> broker delivery -> read
model batch and mapper handler -> the mapper's command -> its events."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import reventless as rv
from reventless import telemetry
from tests.model import Incremented
from tests.schedule.model import EXPIRY, START, Order, Place
from tests.telemetry.conftest import by_name, parent_of
from tests.telemetry.model import Counter, Increment, Ledger, chain_app


def _tp(span: ReadableSpan) -> str:
    c = span.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"


async def test_one_trace_from_command_to_the_next_command(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}")
    async with app:
        await app.event_log(Counter).execute("c-1", Increment(by=2))
        await app.settle()
        stored = await app.event_log(Counter).read()
        noted = await app.event_log(Ledger).read()
    finished = spans.get_finished_spans()
    assert len({s.context.trace_id for s in finished}) == 1, [s.name for s in finished]
    s = by_name(finished)
    command = s["execute Increment"]
    assert parent_of(command) is None
    # the event carries its command's context; the mapper's command continues it
    assert stored[0].trace == _tp(command)
    # the append inside a command: an event on the command's span (no span of its own)
    [append] = [e for e in command.events if e.name == "append"]
    assert append.attributes is not None
    assert append.attributes["reventless.events"] == 1
    assert "append Counter" not in s
    assert parent_of(s["publish Counter"]) == command.context.span_id
    assert parent_of(s["receive Counter"]) == s["publish Counter"].context.span_id
    processes = [x for x in finished if x.name == "process Counter"]
    groups = {x.attributes["messaging.consumer.group.name"] for x in processes}  # type: ignore[index]
    assert groups == {"counter_totals", "to_ledger"}
    assert all(parent_of(x) == command.context.span_id for x in processes)
    assert parent_of(s["handle to_ledger"]) == command.context.span_id
    assert parent_of(s["send Note"]) == s["handle to_ledger"].context.span_id
    assert parent_of(s["execute Note"]) == s["send Note"].context.span_id
    assert [e.name for e in s["execute Note"].events] == ["append"]
    assert noted[0].trace == _tp(s["execute Note"])


async def test_a_batch_of_many_commands_links_their_traces(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}", mapper=False)
    counters = app.event_log(Counter)
    async with app:
        await counters.execute_many([(f"c-{i}", Increment(by=1)) for i in range(20)])
        await app.settle()
    finished = spans.get_finished_spans()
    commands = {x.context.trace_id for x in finished if x.name == "execute Increment"}
    assert len(commands) == 20
    linked = set()
    for x in finished:
        if x.name == "process Counter":
            assert x.parent is not None and x.parent.trace_id in commands
            linked |= {x.parent.trace_id} | {link.context.trace_id for link in x.links}
    assert linked == commands  # every command's trace reaches the read model


async def test_spans_are_not_recorded_and_nothing_is_stored_without_a_provider(
    tmp_path: Path,
) -> None:
    telemetry.configure()  # the global provider: the API's proxy, so off
    assert not telemetry.tracing()
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}")
    async with app:
        await app.event_log(Counter).execute("c-1", Increment(by=2))
        await app.settle()
        assert (await app.event_log(Ledger).read())[0].trace is None
    assert telemetry.traceparent() is None
    with telemetry.span("x") as s:
        assert s is None


async def test_an_append_outside_a_command_is_a_client_span(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 'a.db'}")
    log = app.event_log(Counter)
    async with app:
        await log.append("c-1", [Incremented(by=1)], expected_version=0)
        [stored] = await log.read()
    [append] = [x for x in spans.get_finished_spans() if x.name == "append Counter"]
    assert append.attributes is not None
    assert append.attributes["db.operation.name"] == "append"
    assert append.attributes["db.system.name"] == "sqlite"
    assert stored.trace is None  # its rows were built before the span (no command)


async def test_a_store_from_before_the_trace_column_gets_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    app = rv.App(store=f"sqlite:///{db}")
    app.event_log(Counter)
    async with app:
        await app.event_log(Counter).execute("c-1", Increment(by=1))
    with sqlite3.connect(db) as conn:  # as an earlier version left it
        (table,) = conn.execute("SELECT table_name FROM rv_topics").fetchone()
        conn.execute(f'ALTER TABLE "{table}" DROP COLUMN _trace')
        conn.execute("UPDATE rv_topics SET arrow_schema = 'old'")
    app = rv.App(store=f"sqlite:///{db}")
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment(by=1))
        assert [e.version for e in await log.read()] == [1, 2]


async def test_a_scheduled_command_continues_the_trace_that_scheduled_it(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    clock = rv.ManualClock(START)
    app = rv.App(store=f"sqlite:///{tmp_path / 'a.db'}", options=rv.AppOptions(clock=clock))
    orders = app.event_log(Order)
    async with app:
        await orders.execute("o-1", Place(total=1))  # schedules its expiry
        [fired] = await app.scheduler.advance(EXPIRY)
        assert fired.fired
    s = by_name(spans.get_finished_spans())
    place, fire, expire = s["execute Place"], s["fire Expire"], s["execute Expire"]
    assert fire.context.trace_id == place.context.trace_id
    assert parent_of(fire) == place.context.span_id
    assert parent_of(expire) == fire.context.span_id
