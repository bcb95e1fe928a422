"""Batch handlers (``SideEffectHandler.on_batch``): pages as ``EventBatch``es, read as
Arrow columns where the store can, with retries, dead letters and redrives per event."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import reventless as rv
from reventless.store import arrowhelper
from tests.arrow_pages import arrow_widths, counting
from tests.model import Counter, Increment, Incremented, Reset, ResetCounter


def _app(url: str, page: int = 100) -> rv.App:
    opts = rv.AppOptions(collector=rv.CollectorOptions(page_size=page, poll_interval=0.05))
    return rv.App(store=url, options=opts)


async def test_catch_up_hands_pages_of_columns_in_offset_order(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every event of the handler's type reaches it once, in offset order, a page at a
    time; the other type only moves the checkpoint. Arrow columns and envelopes agree
    with the log. (A log this short is read as rows: helpers start for long reads.)"""
    arrow_pages = counting(monkeypatch)
    writer = rv.App(store=shared_url)
    log = writer.event_log(Counter)
    async with writer:
        for i in range(30):
            await log.execute_many([(f"c-{k}", Increment(by=k + 1)) for k in range(10)])
            if i % 7 == 6:
                await log.execute("c-3", ResetCounter())
        expected = [e async for e in log.iter() if e.type == "Incremented"]
        head = await log.head()
    batches: list[rv.EventBatch[Incremented]] = []
    counter = rv.SideEffectHandler("count")

    @counter.on_batch(Incremented)
    async def _count(batch: rv.EventBatch[Incremented]) -> None:
        batches.append(batch)

    app = _app(shared_url, page=64)
    app.event_log(Counter)
    handle = app.collect(counter)
    async with app:
        await app.settle()
        assert await handle.lag() == {"Counter": 0}
        schema = app.event_log(Counter).arrow_schema
    assert all(0 < len(b) <= 64 and b.arrow.schema == schema for b in batches)
    offsets = [o for b in batches for o in b.arrow.column("_offset").to_pylist()]
    assert offsets == [e.offset for e in expected]
    assert sum(pc.sum(b.arrow.column("by")).as_py() for b in batches) == sum(
        e.event.by for e in expected
    )
    assert [ev for b in batches for ev in b] == expected
    assert (batches[0].first_offset, batches[-1].last_offset) == (
        expected[0].offset,
        expected[-1].offset,
    )
    # rows (under ``arrowhelper.SPAWN_AT`` rows to read: no helper starts)
    assert arrow_pages == [] and head < arrowhelper.SPAWN_AT


async def test_live_events_arrive_as_batches(any_url: str) -> None:
    seen: list[tuple[str, int]] = []
    counter = rv.SideEffectHandler("live")

    @counter.on_batch(Incremented)
    def _count(batch: rv.EventBatch[Incremented]) -> None:  # a plain function works too
        seen.extend((a, len(batch)) for a in batch.arrow.column("_aggregate_id").to_pylist())

    app = _app(any_url)
    log = app.event_log(Counter)
    app.collect(counter)
    async with app:
        for i in range(20):
            await log.execute(f"a-{i % 3}", Increment())
        await app.settle()
    assert sorted(a for a, _ in seen) == sorted(f"a-{i % 3}" for i in range(20))


async def test_a_failing_batch_dead_letters_its_events_and_redrives_one_by_one(
    shared_url: str,
) -> None:
    """A batch that keeps failing is tried ``max_attempts`` times, then each of its events
    is dead-lettered (stored) and its aggregate parked: its later events wait behind it,
    other aggregates go on. A redrive calls the handler with batches of one, in order."""
    calls: list[list[tuple[str, int]]] = []
    broken = {"on": True}
    effect = rv.SideEffectHandler("webhook", max_attempts=3, backoff=0.001)

    @effect.on_batch(Incremented)
    async def _send(batch: rv.EventBatch[Incremented]) -> None:
        ids = [(ev.aggregate_id or "", ev.version or 0) for ev in batch]
        calls.append(ids)
        if broken["on"] and any(a == "bad" for a, _ in ids):
            raise RuntimeError("webhook down")

    app = _app(shared_url)
    log = app.event_log(Counter)
    handle = app.collect(effect)
    async with app:
        await log.execute("bad", Increment())
        await app.settle()
        assert calls == [[("bad", 1)]] * 3
        await log.execute("good", Increment())
        await log.execute("bad", Increment())
        await app.settle()
        letters = await app.dead_letters("webhook")  # read back from the store
        assert [(d.aggregate_id, d.offset, d.attempts) for d in letters] == [
            ("bad", 1, 3),
            ("bad", 3, 0),
        ]
        assert "webhook down" in letters[0].error and "parked" in letters[1].error
        assert calls[3] == [("good", 1)]  # the parked aggregate's event stayed out
        broken["on"] = False
        assert await handle.redrive() == rv.RedriveReport(redriven=2, still_parked=0)
        assert calls[-2:] == [[("bad", 1)], [("bad", 2)]]
        assert await app.dead_letters("webhook") == []


async def refused_at_start(effect: rv.SideEffectHandler, match: str) -> None:
    """Starting an App that collects ``effect`` raises ``SpecError`` (``match``)."""
    app = rv.App(store="sqlite://")
    app.event_log(Counter)
    app.collect(effect)
    with pytest.raises(rv.SpecError, match=match):
        async with app:
            pass


async def test_a_batch_handler_is_its_logs_only_handler() -> None:
    effect = rv.SideEffectHandler("mixed")
    effect.on_batch(Incremented)(lambda batch: None)
    effect.on(Reset)(lambda ev: None)
    await refused_at_start(effect, "only handler")
    with pytest.raises(rv.SpecError, match="two handlers"):
        effect.on_batch(Incremented)(lambda batch: None)


#: What a handler declaring ``columns=["by"]`` gets: those, with the collector's own.
BY_COLUMNS = ["_offset", "_aggregate_id", "_type", "_trace", "by"]


async def test_a_batch_handler_that_names_its_columns_gets_pages_of_those(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_batch(columns=["by"])``: the store reads that column and the collector's own
    (``_offset``, ``_aggregate_id``, ``_type``, ``_trace``) and nothing else; the batches
    hold them, with the values a full read has; envelopes are refused."""
    writer = rv.App(store=shared_url)
    log = writer.event_log(Counter)
    async with writer:
        for _ in range(30):
            await log.execute_many([(f"c-{k}", Increment(by=k + 1)) for k in range(10)])
        await log.execute("c-3", ResetCounter())
        full = pa.Table.from_batches([b async for b in log.read_batches()])
    widths = arrow_widths(monkeypatch)
    batches: list[rv.EventBatch[Incremented]] = []
    refused: list[Exception] = []
    counter = rv.SideEffectHandler("count")

    @counter.on_batch(Incremented, columns=["by"])
    async def _count(batch: rv.EventBatch[Incremented]) -> None:
        batches.append(batch)
        try:
            batch.envelopes()
        except rv.SpecError as exc:
            refused.append(exc)

    app = _app(shared_url, page=64)
    app.event_log(Counter)
    app.collect(counter)
    async with app:
        await app.settle()
    got = pa.Table.from_batches([b.arrow for b in batches])
    increments = full.filter(pc.equal(full.column("_type"), "Incremented"))
    assert got.equals(increments.select(BY_COLUMNS))
    assert len(refused) == len(batches) and "columns=" in str(refused[0])
    assert widths and set(widths) == {len(BY_COLUMNS)}  # every page read was that narrow


async def test_a_failing_batch_of_named_columns_dead_letters_whole_events(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch read with its handler's columns only that keeps failing: its events are
    read again whole for their dead letters; a parked aggregate's later events are held
    back from Arrow pages too; a redrive's batch of one has the same columns."""
    widths = arrow_widths(monkeypatch)
    calls: list[list[str]] = []
    shapes: set[tuple[str, ...]] = set()
    broken = {"on": True}
    effect = rv.SideEffectHandler("webhook", max_attempts=2, backoff=0.001)

    @effect.on_batch(Incremented, columns=["by"])
    async def _send(batch: rv.EventBatch[Incremented]) -> None:
        ids = batch.arrow.column("_aggregate_id").to_pylist()
        calls.append(ids)
        shapes.add(tuple(batch.arrow.schema.names))
        if broken["on"] and "bad" in ids:
            raise RuntimeError("webhook down")

    writer = rv.App(store=shared_url)
    log = writer.event_log(Counter)

    def collecting() -> tuple[rv.App, Any]:  # (each start catches up: pages, not live)
        app = _app(shared_url)
        app.event_log(Counter)
        return app, app.collect(effect)

    async with writer:
        await log.execute("bad", Increment(by=7))
        app, _ = collecting()
        async with app:
            await app.settle()
        await log.execute_many([("good", Increment()), ("bad", Increment()), ("good", Increment())])
        app, handle = collecting()
        async with app:
            await app.settle()
            letters = await app.dead_letters("webhook")  # read back from the store
            assert [(d.aggregate_id, d.offset, d.attempts) for d in letters] == [
                ("bad", 1, 2),
                ("bad", 4, 0),  # (execute_many appends each aggregate's commands together)
            ]
            assert letters[0].msg_id == (await log.read(1, 1))[0].msg_id  # the whole event
            assert "webhook down" in letters[0].error and "parked" in letters[1].error
            assert calls[-1] == ["good", "good"]  # the parked aggregate's event stayed out
            broken["on"] = False
            assert await handle.redrive() == rv.RedriveReport(redriven=2, still_parked=0)
            assert calls[-2:] == [["bad"], ["bad"]]
    assert shapes == {tuple(BY_COLUMNS)} and widths


async def test_a_batch_handler_names_columns_of_its_log() -> None:
    effect = rv.SideEffectHandler("typo")
    effect.on_batch(Incremented, columns=["bye"])(lambda batch: None)
    await refused_at_start(effect, "bye")
    with pytest.raises(rv.SpecError, match="distinct"):
        rv.SideEffectHandler("twice").on_batch(Incremented, columns=["by", "by"])
