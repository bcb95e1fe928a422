"""Stopping never hangs on a cancel that Python swallowed.

Python 3.11's ``asyncio.wait_for`` returns the inner result instead of raising when the
outer task is cancelled just as the awaited event is set, so a loop built on it survives
``task.cancel()`` and whoever gathers it waits forever (CI hung in a leased group's stop
this way). Library code waits with ``asyncio.timeout``, which keeps the cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

import pytest

from tests.integration.group_members import leased_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("yields", range(6))
async def test_a_timeout_wait_keeps_a_cancel_that_lands_as_the_event_is_set(yields: int) -> None:
    ev = asyncio.Event()

    async def loop() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await ev.wait()
            ev.clear()

    task = asyncio.create_task(loop())
    for _ in range(3):
        await asyncio.sleep(0)
    ev.set()
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=1.0)
    assert done, "the loop survived its cancel"


@pytest.mark.parametrize("yields", range(4))
async def test_a_leased_member_stops_as_its_leases_change(tmp_path: Path, yields: int) -> None:
    app = leased_app(
        f"sqlite:///{tmp_path / 'store.db'}",
        "memory://",
        "w",
        0,
        ttl=5.0,
        heartbeat=0.05,
        poll=0.05,
    )
    await app.start()
    try:
        member = app.collector("ordered").lease
        assert member is not None
        member._changed.set()  # what a heartbeat's grant does
        for _ in range(yields):
            await asyncio.sleep(0)
        async with asyncio.timeout(10):
            await member.stop()
    finally:
        await app.stop()


def test_library_code_does_not_wait_with_wait_for() -> None:
    sources = [*ROOT.glob("reventless/**/*.py"), *ROOT.glob("adapters/*/reventless_*/**/*.py")]
    assert sources
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sources
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\bwait_for\(", line) and "def wait_for" not in line
    ]
    assert found == [], "use asyncio.timeout (3.11's wait_for can swallow a cancel)"
