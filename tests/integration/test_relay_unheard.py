"""The relay does not encode what no one receives: with the in-memory broker and no
subscriber of a topic, its rows are passed over (position and ``rv-prev`` chain move on);
a topic with a subscriber is published as before; ``AppOptions(publish=False)`` runs no
relay at all. Collectors still see every event (read back from their read models)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

import reventless as rv
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
