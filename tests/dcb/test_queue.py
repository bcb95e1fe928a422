"""``DecisionQueue``: decisions of one process whose queries share a key take turns."""

from __future__ import annotations

import asyncio

import pytest

import reventless as rv
from reventless.dcb.queue import DecisionQueue, queue_keys


def test_the_keys_of_a_query() -> None:
    q = rv.Query.of(types=["A", "B"], tags=["course:c1", "student:s1"]) | rv.Query.of(
        types=["Invoice"]
    )
    assert queue_keys(q) == ["tag\0course:c1", "tag\0student:s1", "type\0Invoice"]
    assert queue_keys(rv.Query.all()) == ["*"]
    assert queue_keys(rv.Query(())) == []


async def test_holders_of_a_shared_key_take_turns_and_others_do_not_wait() -> None:
    queue = DecisionQueue()
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        async with queue.hold(["a", "b"]):
            order.append("first in")
            first_in.set()
            await release_first.wait()
            order.append("first out")

    async def shares_b() -> None:
        await first_in.wait()
        async with queue.hold(["b", "c"]):
            order.append("second in")

    async def disjoint() -> None:
        await first_in.wait()
        async with queue.hold(["d"]):
            order.append("disjoint in")

    tasks = [asyncio.create_task(f()) for f in (first, shares_b, disjoint)]
    await tasks[2]  # the disjoint holder ran while the first still holds a and b
    assert order == ["first in", "disjoint in"]
    assert not tasks[1].done()
    release_first.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "disjoint in", "first out", "second in"]
    assert len(queue) == 0


async def test_a_waiter_cancelled_releases_nothing_it_did_not_hold() -> None:
    queue = DecisionQueue()
    held = asyncio.Event()
    done = asyncio.Event()

    async def holder() -> None:
        async with queue.hold(["b"]):
            held.set()
            await done.wait()

    async def waiter() -> None:
        async with queue.hold(["a", "b"]):  # takes a, waits for b
            pytest.fail("the waiter must not get in")

    h = asyncio.create_task(holder())
    await held.wait()
    w = asyncio.create_task(waiter())
    while len(queue) < 2:  # the waiter has registered a and b
        await asyncio.sleep(0)
    w.cancel()
    with pytest.raises(asyncio.CancelledError):
        await w
    async with queue.hold(["a"]):  # a was released
        pass
    done.set()
    await h
    assert len(queue) == 0
