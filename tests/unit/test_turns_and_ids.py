"""Per-key turns (first come, first served; a cancelled waiter passes its turn on) and
UUIDv7 ids drawn from a pool of randomness (a forked child draws its own)."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from reventless import ids
from reventless.ids import uuid7_strs
from reventless.turns import Turns


async def test_turns_run_one_holder_per_key_in_arrival_order() -> None:
    turns, log = Turns(), []

    async def work(key: str, n: int) -> None:
        if not turns.try_take(key):
            await turns.wait(key)
        try:
            log.append(("in", key, n))
            await asyncio.sleep(0)
            log.append(("out", key, n))
        finally:
            turns.give(key)

    await asyncio.gather(*(work(k, n) for n in range(5) for k in ("a", "b")))
    for key in ("a", "b"):
        mine = [(what, n) for what, k, n in log if k == key]
        assert mine == [(w, n) for n in range(5) for w in ("in", "out")]  # never overlap
    assert len(turns) == 0


async def test_a_cancelled_waiter_passes_the_turn_on() -> None:
    turns = Turns()
    assert turns.try_take("k")
    got: list[int] = []

    async def wait(n: int) -> None:
        await turns.wait("k")
        got.append(n)
        turns.give("k")

    first, second, third = (asyncio.create_task(wait(n)) for n in range(3))
    await asyncio.sleep(0)
    first.cancel()  # cancelled while waiting: leaves the queue
    turns.give("k")  # the turn reaches second...
    second.cancel()  # ...as it is cancelled: it must pass it to third
    await asyncio.gather(first, second, third, return_exceptions=True)
    assert got == [2]
    assert len(turns) == 0 and turns.try_take("k")


def test_ids_are_increasing_uuid7_and_unique() -> None:
    ids = [i for _ in range(300) for i in uuid7_strs(7)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)


def test_ids_borrow_the_next_millisecond_when_the_counter_overflows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a frozen clock: 4,096 ids per millisecond, then the counter borrows the next one,
    # also in the middle of one call
    frozen = ids.time.time_ns()
    monkeypatch.setattr(ids.time, "time_ns", lambda: frozen)
    made = [i for _ in range(60) for i in uuid7_strs(97)] + uuid7_strs(1) + uuid7_strs(9000)
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(uuid.UUID(i).version == 7 and uuid.UUID(i).variant == uuid.RFC_4122 for i in made)
    millis = sorted({int(i[:8] + i[9:13], 16) for i in made})
    assert millis == list(range(millis[0], millis[0] + len(millis))) and len(millis) == 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_does_not_repeat_its_parents_randomness() -> None:
    uuid7_strs(1)  # the pool is filled
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(r)
        os.write(w, ",".join(uuid7_strs(50)).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    mine = uuid7_strs(50)
    tail = {i[-17:] for i in mine}  # the random part (the time part may well repeat)
    assert len(child) == 50 and not tail & {i[-17:] for i in child}
