"""Writer processes for the PostgreSQL stress test (importable by spawned processes)."""

from __future__ import annotations

import asyncio

import reventless as rv
from tests.model import Counter, Increment


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
