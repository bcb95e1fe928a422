"""A collector group member process (importable by spawned processes) and its read model."""

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


async def _serve(store: str, broker: str, member: int, members: int) -> None:
    app = member_app(store, broker, member, members, poll=60.0)
    async with app:
        print("ready", flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    store, broker, member, members = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    asyncio.run(_serve(store, broker, member, members))
