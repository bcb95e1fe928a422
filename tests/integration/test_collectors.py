"""Collectors against a real SQLite store and the in-memory broker."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.relay import decode_batch
from tests.model import Counter, Increment, Incremented, ResetCounter, Total, totals


async def table_rows(app: rv.App, name: str) -> list[Any]:
    return await app.store.db.read(
        lambda c: c.exec_driver_sql(f"SELECT * FROM rm_{name} ORDER BY id").all()
    )


async def seed(log: rv.EventLog[Counter], n: int, aggregates: int = 7) -> None:
    for i in range(n):
        await log.execute(f"c-{i % aggregates}", Increment(by=i % 5 + 1))
        if i % 23 == 22:
            await log.execute(f"c-{i % aggregates}", ResetCounter())


async def test_read_model_follows_live_and_checkpoint_commits_with_rows(store_url: str) -> None:
    app = rv.App(store=store_url)
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        await seed(log, 200)
        await app.settle()
        rows = await view.all()
        head = await log.head()
        cp = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                "SELECT \"offset\" FROM rv_checkpoints WHERE component = 'counter_totals'"
            ).scalar_one()
        )
        assert cp == head
        for r in rows:
            assert r.value == (await log.load(r.id)).value
        assert sum(r.events for r in rows) == head
        assert await view.lag() == {"Counter": 0}
        assert await view.find(id="c-1") == [await view.get("c-1")]


async def test_duplicated_and_reordered_deliveries_leave_the_model_identical(
    store_url: str,
) -> None:
    reference = rv.App(store=store_url)
    log = reference.event_log(Counter)
    reference.collect(totals)
    async with reference:
        await seed(log, 150)
        await reference.settle()
        expected = await table_rows(reference, "counter_totals")
        rows = await reference.store.read("Counter", 1, 10_000)

        # A second collector gets the same rows in shuffled, duplicated, overlapping batches.
        second = rv.ReadModel("counter_totals_2", row=Total, key="id")
        for ev_type, spec in totals.handlers.items():
            second.handlers[ev_type] = spec
        batches = [rows[i : i + random.randint(1, 20)] for i in range(0, len(rows), 9)]
        batches += random.sample(batches, len(batches) // 2)
        random.Random(4).shuffle(batches)
        batches.append(rows[-1:])  # the tail must reach it somehow (live, or the poll)
        app2 = None if reference.store.db.is_memory else rv.App(store=store_url)
        if app2 is None:  # one in-memory database: reuse the running store
            from reventless.collect.kinds import ReadModelCollector
            from reventless.store.readmodel import SqlReadModelTable as ReadModelTable

            table = ReadModelTable(second, reference.store.db)
            await reference.store.db.write(table.create_sync)
            coll = ReadModelCollector(
                second,
                table,
                store=reference.store,
                broker=reference.broker,
                topics={"Counter": reference.store.topic("Counter")},
                dispatch={"Counter": {t.event_type: s for t, s in second.handlers.items()}},
            )
            coll.checkpoints = {("Counter", 0): 0}
            for b in batches:
                await coll.deliver("Counter", b)
            got = await table_rows(reference, "counter_totals_2")
        else:
            app2.event_log(Counter)
            app2.collect(second)
            async with app2:
                coll = app2.collector("counter_totals_2")
                for b in batches:
                    await coll.deliver("Counter", b)
                got = await table_rows(app2, "counter_totals_2")
        assert got == expected


async def test_new_collector_catches_up_from_the_store(file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Counter)
    async with app:
        await seed(log, 120)
    app2 = rv.App(store=file_url)
    app2.event_log(Counter)
    view = app2.collect(totals)
    async with app2:
        await app2.settle()
        assert sum(r.events for r in await view.all()) == 120 + 120 // 23 * 2


async def test_outbox_delivers_what_was_committed_while_the_broker_failed(store_url: str) -> None:
    broker = rv.InMemoryBroker()
    app = rv.App(store=store_url, broker=broker, options=rv.AppOptions(relay_retry_interval=0.05))
    log = app.event_log(Counter)
    seen: list[int] = []

    async def on_message(msgs: Sequence[rv.Message]) -> None:
        for msg in msgs:
            seen.extend(decode_batch(msg.data).column("_offset").to_pylist())

    async with app:
        await broker.subscribe("raw", ["Counter"], on_message)
        broker.set_available(False)
        for i in range(30):  # commands succeed: the broker failure is not theirs
            await log.execute(f"c-{i % 3}", Increment())
        await asyncio.sleep(0.2)
        assert seen == []
        broker.set_available(True)
        for _ in range(200):
            if len(seen) >= 30:
                break
            await asyncio.sleep(0.02)
    assert sorted(set(seen)) == list(range(1, 31))


async def test_collector_catches_up_from_store_while_broker_is_down(store_url: str) -> None:
    broker = rv.InMemoryBroker()
    app = rv.App(
        store=store_url,
        broker=broker,
        options=rv.AppOptions(collector=rv.CollectorOptions(poll_interval=0.05)),
    )
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        broker.set_available(False)
        for _ in range(10):
            await log.execute("c-1", Increment())
        await app.settle(timeout=10)
        assert (await view.get("c-1")) == Total(id="c-1", value=10, events=10)


class Flaky:
    def __init__(self, fail_for: set[str], failures: int) -> None:
        self.fail_for, self.failures = fail_for, failures
        self.calls: list[tuple[str, int]] = []
        self.done: dict[str, list[int]] = {}

    def __call__(self, ev: rv.Envelope[Incremented]) -> None:
        assert ev.aggregate_id is not None and ev.version is not None
        self.calls.append((ev.aggregate_id, ev.version))
        if ev.aggregate_id in self.fail_for and self.failures > 0:
            self.failures -= 1
            raise RuntimeError(f"webhook down for {ev.aggregate_id}")
        self.done.setdefault(ev.aggregate_id, []).append(ev.version)


async def test_side_effect_retries_dead_letters_parks_and_redrives_in_order(
    store_url: str,
) -> None:
    flaky = Flaky({"bad"}, failures=3)
    effect = rv.SideEffectHandler("webhook", max_attempts=3, backoff=0.001)
    effect.on(Incremented)(flaky)
    app = rv.App(store=store_url)
    log = app.event_log(Counter)
    handle = app.collect(effect)
    async with app:
        await log.execute("good", Increment())
        for _ in range(3):
            await log.execute("bad", Increment())
        await log.execute("good", Increment())
        await app.settle()
        letters = await handle.dead_letters()
        assert [(d.aggregate_id, d.offset, d.attempts) for d in letters] == [
            ("bad", 2, 3),
            ("bad", 3, 0),
            ("bad", 4, 0),
        ]
        assert letters[0].component == "webhook" and "webhook down" in letters[0].error
        assert "parked" in letters[1].error
        assert flaky.done == {"good": [1, 2]}
        # stored, not just in memory: a fresh read of the table agrees
        assert len(await app.dead_letters("webhook")) == 3
        report = await handle.redrive()
        assert report == rv.RedriveReport(redriven=3, still_parked=0)
        assert flaky.done["bad"] == [1, 2, 3]  # in per-aggregate order
        assert await handle.dead_letters() == []
        await log.execute("bad", Increment())
        await app.settle()
        assert flaky.done["bad"] == [1, 2, 3, 4]


async def test_a_side_effects_first_failure_is_retried_and_a_refusal_dead_letters_at_once(
    store_url: str,
) -> None:
    """The direct first call of an untraced side effect keeps the retry rules: a failure
    is retried (the handler called again), a business refusal (``Rejected``) is
    dead-lettered after that one attempt and parks its aggregate, and a schedule that
    fails to build counts as a failed attempt, with no batch lost."""
    calls: dict[str, int] = {}

    effect = rv.SideEffectHandler("direct", max_attempts=3, backoff=0.001)

    @effect.on(Incremented)
    def _h(ev: rv.Envelope[Incremented]) -> Any:
        assert ev.aggregate_id is not None
        n = calls[ev.aggregate_id] = calls.get(ev.aggregate_id, 0) + 1
        if ev.aggregate_id == "flaky" and n == 1:
            raise RuntimeError("down once")
        if ev.aggregate_id == "refused":
            raise rv.Rejected("no", "not this one")
        if ev.aggregate_id == "bad-schedule":  # a target this App has no log for
            return rv.Schedule("Nowhere", "x", Increment(), after=dt.timedelta(0))
        return None

    app = rv.App(store=store_url)
    log = app.event_log(Counter)
    handle = app.collect(effect)
    async with app:
        for agg in ("ok", "flaky", "refused", "refused", "bad-schedule"):
            await log.execute(agg, Increment())
        await app.settle()
        letters = sorted(await handle.dead_letters(), key=lambda d: d.offset)
        assert [(d.aggregate_id, d.attempts) for d in letters] == [
            ("refused", 1),
            ("refused", 0),
            ("bad-schedule", 3),
        ]
        assert "not this one" in letters[0].error and "parked" in letters[1].error
        assert "Nowhere" in letters[2].error
        assert calls == {"ok": 1, "flaky": 2, "refused": 1, "bad-schedule": 3}
        assert await handle.lag() == {"Counter": 0}


async def test_read_model_handler_error_dead_letters_without_losing_the_batch(
    store_url: str,
) -> None:
    broken = rv.ReadModel("broken_totals", row=Total, key="id")

    @broken.on(Incremented)
    def _h(ev: rv.Envelope[Incremented]) -> rv.Upsert[Total]:
        if ev.aggregate_id == "poison":
            raise ValueError("cannot project poison")
        assert ev.aggregate_id is not None
        return rv.Upsert(Total(id=ev.aggregate_id, value=ev.event.by, events=1))

    app = rv.App(store=store_url)
    log = app.event_log(Counter)
    view = app.collect(broken)
    async with app:
        for agg in ("a", "poison", "b"):
            await log.execute(agg, Increment(by=2))
        await app.settle()
        assert [r.id for r in await view.all()] == ["a", "b"]
        [letter] = await view.dead_letters()
        assert letter.error.startswith("ValueError") and letter.aggregate_id == "poison"
        assert await view.lag() == {"Counter": 0}


async def test_pause_resume_and_lag(store_url: str) -> None:
    app = rv.App(store=store_url)
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        await log.execute("c", Increment())
        await app.settle()
        view.pause()
        for _ in range(5):
            await log.execute("c", Increment())
        await asyncio.sleep(0.1)
        assert await view.lag() == {"Counter": 5}
        view.resume()
        await view.wait_caught_up()
        assert (await view.get("c")) == Total(id="c", value=6, events=6)


CRASH_CHILD = """
import asyncio, sys
import reventless as rv
from tests.model import Counter, Total

slow = rv.ReadModel("counter_totals", row=Total, key="id")

@slow.on(*Counter.event_classes)
def _h(ev, current):
    import time
    time.sleep(0.001)
    row = current or Total(id=ev.aggregate_id, value=0, events=0)
    return rv.Upsert(Total(id=row.id, value=row.value, events=row.events + 1))

async def main():
    opts = rv.AppOptions(collector=rv.CollectorOptions(page_size=50))
    app = rv.App(store=sys.argv[1], options=opts)
    app.event_log(Counter)
    app.collect(slow)
    print("started", flush=True)
    async with app:
        await asyncio.sleep(60)

asyncio.run(main())
"""


async def checkpoint_past(db: Path, offset: int) -> int:
    """Wait until the collector's checkpoint in ``db`` passes ``offset``; return it."""
    import sqlite3

    while True:
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
            try:
                row = conn.execute('SELECT MAX("offset") FROM rv_checkpoints').fetchone()
            except sqlite3.OperationalError:  # the table is not there yet
                row = None
        if row and row[0] is not None and row[0] > offset:
            return int(row[0])
        await asyncio.sleep(0.02)


@pytest.mark.slow
async def test_crash_between_handler_and_checkpoint_replays_without_double_effect(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    app = rv.App(store=url)
    log = app.event_log(Counter)
    async with app:
        for i in range(3000):
            await log.append(f"c-{i % 5}", [Incremented()], expected_version=i // 5)
    script = tmp_path / "child.py"
    script.write_text(CRASH_CHILD)
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    seen = 0
    for _ in range(2):  # kill the projection mid-batch, twice, once it has moved on
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), url, stdout=asyncio.subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        seen = await asyncio.wait_for(checkpoint_past(tmp_path / "crash.db", seen), 60)
        await asyncio.sleep(0.05)  # into its next batch
        proc.kill()
        await proc.wait()
    check = rv.App(store=url)
    check.event_log(Counter)
    async with check:
        cp = await check.store.db.read(
            lambda c: c.exec_driver_sql('SELECT "offset" FROM rv_checkpoints').all()
        )
        assert cp and 0 < cp[0][0] < 3000, cp  # it really was interrupted part-way
        counted = await check.store.db.read(
            lambda c: c.exec_driver_sql("SELECT SUM(events) FROM rm_counter_totals").scalar()
        )
        assert counted == cp[0][0]  # rows and checkpoint moved together
    final = rv.App(store=url)
    final.event_log(Counter)
    view = final.collect(totals)  # same name and shape: continues from the checkpoint
    async with final:
        await final.settle()
        assert sum(r.events for r in await view.all()) == 3000
