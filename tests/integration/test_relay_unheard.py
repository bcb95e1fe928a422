"""The relay does not encode what no one receives: with the in-memory broker and no
subscriber of a topic, its rows are passed over (position and ``rv-prev`` chain move on);
a topic with a subscriber is published as before; ``AppOptions(publish=False)`` runs no
relay at all. Collectors still see every event (read back from their read models)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.codec import OFFSET_AT, PARTITION_AT
from reventless.topicdef import partition_of
from tests.model import Counter, Increment


class Total(BaseModel):
    id: str
    n: int = 0


def totals() -> rv.ReadModel[Total]:
    view = rv.ReadModel("totals", row=Total, key="id")

    @view.on(*Counter.event_classes)
    def _(ev: rv.Envelope[rv.Event], row: Total | None) -> rv.Upsert[Total]:
        assert ev.aggregate_id is not None
        return rv.Upsert(Total(id=ev.aggregate_id, n=(row.n if row else 0) + 1))

    return view


def listener() -> tuple[
    list[rv.Message], asyncio.Event, Callable[[Sequence[rv.Message]], Awaitable[None]]
]:
    """A late subscriber's handler: what it got, and an event set when it got something."""
    got: list[rv.Message] = []
    heard = asyncio.Event()

    async def handler(msgs: Sequence[rv.Message]) -> None:
        got.extend(msgs)
        heard.set()

    return got, heard, handler


async def test_no_subscriber_no_encoding_and_a_later_collector_sees_everything(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    broker = rv.InMemoryBroker()
    app = rv.App(store=url, broker=broker)
    log = app.event_log(Counter)
    async with app:
        for i in range(20):
            await log.execute(f"c{i % 4}", Increment(by=1))
        await app.settle()
        relay = app.relay
        assert relay is not None
        while relay.published.get(log.name, 0) < 20:  # the relay runs after the commits
            await relay.publish_pending()
        assert relay.unheard == 20 and broker.published == 0
    # a collector that starts later catches up from the store: nothing was lost
    app2 = rv.App(store=url)
    app2.event_log(Counter)
    view = app2.collect(totals())
    async with app2:
        await app2.settle()
        assert sorted((r.id, r.n) for r in await view.all()) == [(f"c{i}", 5) for i in range(4)]
        assert await app2.store.relay_positions.start([log.name]) == {log.name: 20}


async def test_a_subscribed_topic_is_still_published(tmp_path: Path) -> None:
    broker = rv.InMemoryBroker()
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}", broker=broker)
    log = app.event_log(Counter)
    view = app.collect(totals())
    async with app:
        for i in range(10):
            await log.execute(f"c{i % 2}", Increment(by=1))
        await app.settle()
        assert sorted((r.id, r.n) for r in await view.all()) == [("c0", 5), ("c1", 5)]
        assert broker.published > 0
        assert app.relay is not None and app.relay.unheard == 0


async def test_publish_off_runs_no_relay_and_collectors_still_catch_up(tmp_path: Path) -> None:
    broker = rv.InMemoryBroker()
    app = rv.App(
        store=f"sqlite:///{tmp_path / 's.db'}",
        broker=broker,
        options=rv.AppOptions(publish=False),
    )
    log = app.event_log(Counter)
    view = app.collect(totals())
    async with app:
        for i in range(12):
            await log.execute(f"c{i % 3}", Increment(by=1))
        await app.settle()
        assert sorted((r.id, r.n) for r in await view.all()) == [(f"c{i}", 4) for i in range(3)]
        assert broker.published == 0
        assert app.relay is None


async def test_rows_passed_over_at_commit_keep_the_chain_for_a_later_subscriber(
    tmp_path: Path,
) -> None:
    # Sequential commits with no subscriber are passed over as they commit (the relay's
    # task does not run for them); a subscriber that joins then gets the next commit
    # with ``rv-prev`` naming the last row passed over, so it sees no gap.
    broker = rv.InMemoryBroker()
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}", broker=broker)
    log = app.event_log(Counter)
    got, heard, handler = listener()
    async with app:
        for _ in range(7):
            await log.execute("c0", Increment(by=1))
        relay = app.relay
        assert relay is not None
        assert relay.unheard == 7 and relay.published[log.name] == 7 and broker.published == 0
        sub = await broker.subscribe("late", [log.name], handler)
        await log.execute("c0", Increment(by=1))
        await asyncio.wait_for(heard.wait(), 10)
        await sub.close()
    assert [(m.headers["rv-first"], m.headers["rv-prev"]) for m in got] == [("8", "7")]
    assert relay.unheard == 7 and relay.published[log.name] == 8


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_bulk_commit_passed_over_keeps_each_partitions_chain(
    tmp_path: Path, partitions: int
) -> None:
    # ``execute_many`` commits one result per aggregate in one group; passed over
    # together, they move each partition's ``rv-prev`` chain to its own last row.
    broker = rv.InMemoryBroker()
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}", broker=broker)
    log = app.event_log(Counter, partitions=partitions)
    got, heard, handler = listener()
    async with app:
        done = await log.execute_many((f"c{i}", Increment(by=1)) for i in range(30))
        assert len(done) == 30
        relay = app.relay
        assert relay is not None
        assert relay.unheard == 30 and relay.published[log.name] == 30
        assert broker.published == 0
        stored = await app.store.read(log.name, 1, 1000)  # read back: what landed
        assert len(stored) == 30
        last: dict[int, int] = {}
        for r in stored:
            last[r[PARTITION_AT]] = r[OFFSET_AT]
        sub = await broker.subscribe("late", [log.name], handler)
        await log.execute("c7", Increment(by=1))
        await asyncio.wait_for(heard.wait(), 10)
        await sub.close()
    part = partition_of("c7", partitions)
    assert [(m.headers["rv-first"], m.headers["rv-prev"]) for m in got] == [("31", str(last[part]))]
    assert len(last) == partitions
