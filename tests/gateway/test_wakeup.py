"""Live delivery: a commit wakes open SSE streams at once (PostgreSQL: NOTIFY; a SQLite
file: the ``PRAGMA data_version`` probe), also when another process commits. The gateway's
poll interval is set to a minute, so only a wake-up can deliver within the test's bound."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx

from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

OPERATOR = auth("operator-token")
ROOT = Path(__file__).resolve().parents[2]
PUBLISH = """
import asyncio, sys
from tests.subscribe.conftest import order_rows, orders_app

async def main() -> None:
    app, topic = orders_app(sys.argv[1])
    async with app:
        await topic.publish(order_rows(int(sys.argv[3]), start=int(sys.argv[2])))

asyncio.run(main())
"""


async def publish_elsewhere(url: str, start: int, n: int) -> None:
    """Commit ``n`` orders from another process."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PUBLISH, url, str(start), str(n), cwd=ROOT
    )
    assert await proc.wait() == 0


async def next_event_id(lines: object) -> int:
    async for line in lines:  # type: ignore[attr-defined]
        if line.startswith("id: "):
            return int(line[4:])
    raise AssertionError("the stream ended")


async def test_commits_of_another_process_wake_an_idle_stream(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url, poll_interval=60.0, keepalive=60.0) as base:
        await topic.publish(order_rows(1))
        async with httpx.AsyncClient(base_url=base, headers=OPERATOR) as http:
            r = await http.post("/subscriptions", json={"topic": "orders", "from": "latest"})
            sid = r.json()["id"]
            async with http.stream("GET", f"/subscriptions/{sid}/stream", timeout=30) as s:
                lines = s.aiter_lines()
                assert await anext(lines) == "retry: 1000"
                for offset in (2, 3):  # the stream waits (idle) before each commit
                    await publish_elsewhere(db_url, offset, 1)
                    async with asyncio.timeout(10):  # far below the 60 s poll interval
                        assert await next_event_id(lines) == offset
                # the gateway's own process commits too: the same wake-up
                await topic.publish(order_rows(2, start=10))
                async with asyncio.timeout(10):
                    assert [await next_event_id(lines), await next_event_id(lines)] == [4, 5]
