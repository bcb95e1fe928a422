"""Writer processes for the PostgreSQL stress test (importable by spawned processes)."""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel

import reventless as rv
from tests.model import Counter, Increment, Incremented


class Seen(BaseModel):
    offset: int
    aggregate: str


seen = rv.ReadModel("seen_offsets", row=Seen, key="offset")


@seen.on(Incremented)
def _seen(ev: rv.Envelope[Incremented]) -> rv.Upsert[Seen]:
    assert ev.aggregate_id is not None
    return rv.Upsert(Seen(offset=ev.offset, aggregate=ev.aggregate_id))


def start_replica(url: str, start_at: float) -> int:
    """One replica of an App: starts at wall-clock ``start_at`` (so replicas collide),
    appends one event and returns how many rows its read model has once settled."""

    async def main() -> int:
        app = rv.App(store=url)
        log = app.event_log(Counter)
        view = app.collect(seen)
        await asyncio.sleep(max(0.0, start_at - time.time()))
        async with app:
            await log.execute(f"replica-{os.getpid()}", Increment())
            await app.settle(timeout=30)
            return await view.count()

    return asyncio.run(main())


def write(url: str, worker: int, commands: int, concurrency: int = 8) -> int:
    """Run ``commands`` increments spread over a few aggregates, several in flight."""

    async def main() -> int:
        app = rv.App(store=url, options=rv.AppOptions(log=rv.LogOptions(max_attempts=200)))
        log = app.event_log(Counter)
        async with app:
            items = [(f"w{worker}-{i % 5}", Increment()) for i in range(commands)]
            # the hot aggregate "shared" is written by every process at once
            items += [("shared", Increment()) for _ in range(commands // 10)]
            out = await log.execute_many(items, concurrency=concurrency)
        return sum(1 for r in out if isinstance(r, rv.ExecuteResult))

    return asyncio.run(main())
