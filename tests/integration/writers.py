"""A writer used by the concurrency tests (importable by spawned processes)."""

from __future__ import annotations

import asyncio

import reventless as rv
from tests.model import Counter, Increment


def write(url: str, n: int, aggregate_id: str = "hot") -> int:
    """Execute ``n`` increments on one aggregate from a fresh App; returns how many landed."""

    async def main() -> int:
        app = rv.App(store=url, options=rv.AppOptions(log=rv.LogOptions(max_attempts=200)))
        log = app.event_log(Counter)
        done = 0
        async with app:
            for _ in range(n):
                await log.execute(aggregate_id, Increment())
                done += 1
        return done

    return asyncio.run(main())
