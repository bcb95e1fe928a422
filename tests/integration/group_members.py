"""A collector group member process (importable by spawned processes) and its read model.

``python -m tests.integration.group_members STORE BROKER MEMBER MEMBERS`` runs member
MEMBER of a static group; ``... STORE BROKER leased WORKER LABEL TTL HEARTBEAT POLL`` a
member of a leased group (LABEL is what its rows record in ``member``)."""

from __future__ import annotations

import asyncio
import sys

from pydantic import BaseModel

import reventless as rv
from tests.model import Counter, Incremented, Reset


class Seen(BaseModel):
    id: str
    events: int
    member: int


def ordered(member: int) -> rv.ReadModel[Seen]:
    """Counts each aggregate's events and refuses any that arrive out of order."""
    model = rv.ReadModel("ordered", row=Seen, key="id")

    @model.on(Incremented, Reset)
    def _count(ev: rv.Envelope[Incremented | Reset], current: Seen | None) -> rv.Upsert[Seen]:
        assert ev.aggregate_id is not None
        seen = current.events if current else 0
        if ev.version != seen + 1:
            raise ValueError(f"{ev.aggregate_id}: version {ev.version} after {seen}")
        return rv.Upsert(Seen(id=ev.aggregate_id, events=seen + 1, member=member))

    return model


def member_app(store: str, broker: str, member: int, members: int, poll: float) -> rv.App:
    options = rv.AppOptions(
        partitions=4,
        collector=rv.CollectorOptions(members=members, member=member, poll_interval=poll),
    )
    app = rv.App(store=store, broker=broker, options=options)
    app.event_log(Counter)
    app.collect(ordered(member))
    return app


def leased_app(
    store: str,
    broker: str | rv.Broker,
    worker: str,
    label: int,
    *,
    ttl: float,
    heartbeat: float,
    poll: float,
) -> rv.App:
    """A member of the leased group of the ``ordered`` read model (4 partitions)."""
    options = rv.AppOptions(
        partitions=4,
        collector=rv.CollectorOptions(
            group="leased", worker=worker, lease_ttl=ttl, heartbeat=heartbeat, poll_interval=poll
        ),
    )
    app = rv.App(store=store, broker=broker, options=options)
    app.event_log(Counter)
    app.collect(ordered(label))
    return app


async def _serve(app: rv.App) -> None:
    async with app:
        print("ready", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    store, broker = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "leased":
        worker, label = sys.argv[4], int(sys.argv[5])
        ttl, heartbeat, poll = (float(a) for a in sys.argv[6:9])
        app = leased_app(store, broker, worker, label, ttl=ttl, heartbeat=heartbeat, poll=poll)
    else:
        app = member_app(store, broker, int(sys.argv[3]), int(sys.argv[4]), poll=60.0)
    asyncio.run(_serve(app))
