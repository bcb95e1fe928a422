"""A small filled store for the command to read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import reventless as rv
from tests.model import Counter, Increment, totals

EVENTS = 12


async def fill(url: str, start: int, count: int) -> None:
    """Append ``count`` Increments (by start, start+1, ...) to the Counter topic."""
    app = rv.App(store=url)
    log = app.event_log(Counter)
    app.collect(totals)
    async with app:
        for i in range(start, start + count):
            await log.execute(f"c-{i % 3}", Increment(by=i))
        await app.settle()


@pytest.fixture
def counter_store(tmp_path: Path) -> str:
    """A SQLite store with 12 Counter events (offsets 1-12) and the totals collector."""
    url = f"sqlite:///{tmp_path / 'counter.db'}"
    asyncio.run(fill(url, 1, EVENTS))
    return url
