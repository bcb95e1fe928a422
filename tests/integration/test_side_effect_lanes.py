"""How a side effect's catch-up runs a page whose events interleave many aggregates.

Its handlers run one aggregate after another on the catch-up's own task for as long as
none of them waits; from the first handler that waits on, the aggregates not started yet
run concurrently, a task each. Either way each aggregate's events are handled in order,
each once, and the checkpoint is read back from the store. The reads of the pages ahead
start before a page is handled, whether or not its handlers wait.
"""

from __future__ import annotations

import asyncio
from typing import Any

import reventless as rv
from tests.model import Counter, Incremented

AGGREGATES = 40
EACH = 5


async def interleaved(url: str) -> None:
    """``AGGREGATES`` counters of ``EACH`` events, appended round-robin: every page
    holds events of every aggregate, one after another."""
    app = rv.App(store=url)
    log = app.event_log(Counter)
    async with app:
        for v in range(EACH):
            for i in range(AGGREGATES):
                await log.append(f"c-{i}", [Incremented(by=1)], expected_version=v)


async def catch_up(url: str, effect: rv.SideEffectHandler) -> rv.App:
    app = rv.App(store=url)
    app.event_log(Counter)
    app.collect(effect)
    await app.start()
    await app.settle(timeout=60)
    return app


async def stored_checkpoint(app: rv.App, name: str) -> int:
    checkpoints, _ = await app.store.collectors.load(name)
    return int(checkpoints.get(("Counter", 0), 0))


def in_order(seen: list[tuple[str, int]]) -> dict[str, list[int]]:
    by: dict[str, list[int]] = {}
    for agg, version in seen:
        by.setdefault(agg, []).append(version)
    return by


async def test_handlers_that_do_not_wait_run_on_the_catch_up_without_a_task_each(
    shared_url: str,
) -> None:
    await interleaved(shared_url)
    seen: list[tuple[str, int]] = []
    tasks: set[Any] = set()
    effect = rv.SideEffectHandler("count")

    @effect.on(Incremented)
    async def _count(ev: rv.Envelope[Incremented]) -> None:
        assert ev.aggregate_id is not None and ev.version is not None
        seen.append((ev.aggregate_id, ev.version))
        tasks.add(asyncio.current_task())

    app = await catch_up(shared_url, effect)
    try:
        assert len(seen) == AGGREGATES * EACH
        assert in_order(seen) == {f"c-{i}": list(range(1, EACH + 1)) for i in range(AGGREGATES)}
        assert len(tasks) == 1  # one page, all of it on the catch-up's task
        assert await app.dead_letters("count") == []
        assert await stored_checkpoint(app, "count") == AGGREGATES * EACH
    finally:
        await app.stop()


async def test_handlers_that_wait_overlap_across_aggregates(shared_url: str) -> None:
    """Each handler waits until ten are in flight at once: handled one aggregate after
    another, the first would wait in vain (then every handler stops waiting, and the
    counts below tell)."""
    await interleaved(shared_url)
    seen: list[tuple[str, int]] = []
    flight = {"now": 0, "most": 0}
    ten = asyncio.Event()
    effect = rv.SideEffectHandler("overlap", max_attempts=1)

    @effect.on(Incremented)
    async def _wait(ev: rv.Envelope[Incremented]) -> None:
        assert ev.aggregate_id is not None and ev.version is not None
        flight["now"] += 1
        flight["most"] = max(flight["most"], flight["now"])
        if flight["now"] >= 10:
            ten.set()
        try:
            await asyncio.wait_for(ten.wait(), 5)
        except TimeoutError:
            ten.set()  # in vain: the others need not wait too
        finally:
            flight["now"] -= 1
        seen.append((ev.aggregate_id, ev.version))

    app = await catch_up(shared_url, effect)
    try:
        assert await app.dead_letters("overlap") == []
        assert flight["most"] >= 10
        assert in_order(seen) == {f"c-{i}": list(range(1, EACH + 1)) for i in range(AGGREGATES)}
        assert await stored_checkpoint(app, "overlap") == AGGREGATES * EACH
    finally:
        await app.stop()


async def test_a_retry_mid_page_hands_the_rest_to_tasks_and_keeps_each_order(
    shared_url: str,
) -> None:
    """The first aggregate's first event fails once: its retry's back-off turns the loop,
    and the aggregates after it go on concurrently while it waits."""
    await interleaved(shared_url)
    seen: list[tuple[str, int]] = []
    tasks: set[Any] = set()
    failed_once: set[str] = set()
    effect = rv.SideEffectHandler("retry", max_attempts=3, backoff=0.01)

    @effect.on(Incremented)
    def _h(ev: rv.Envelope[Incremented]) -> None:
        assert ev.aggregate_id is not None and ev.version is not None
        if ev.aggregate_id == "c-0" and "c-0" not in failed_once:
            failed_once.add("c-0")
            raise RuntimeError("down once")
        seen.append((ev.aggregate_id, ev.version))
        tasks.add(asyncio.current_task())

    app = await catch_up(shared_url, effect)
    try:
        assert await app.dead_letters("retry") == []
        assert len(seen) == AGGREGATES * EACH
        assert in_order(seen) == {f"c-{i}": list(range(1, EACH + 1)) for i in range(AGGREGATES)}
        assert len(tasks) == AGGREGATES  # the catch-up's own (c-0) and one per other
        assert seen[0] != ("c-0", 1)  # others went on while c-0 waited out its back-off
        assert await stored_checkpoint(app, "retry") == AGGREGATES * EACH
    finally:
        await app.stop()


async def test_the_next_page_is_being_read_while_a_page_is_handled(shared_url: str) -> None:
    """Handlers that never wait give the event loop no turn until the page's commit: the
    catch-up lets the reads of the pages ahead start before it handles a page, so the
    reader works while the handlers run instead of after them."""
    await interleaved(shared_url)
    app = rv.App(
        store=shared_url, options=rv.AppOptions(collector=rv.CollectorOptions(page_size=50))
    )
    app.event_log(Counter)
    effect = rv.SideEffectHandler("reads")
    asked: list[int] = []  # the first offset of each page read, as the read starts
    reads_at: dict[int, int] = {}  # offset -> the pages asked for when it was handled

    @effect.on(Incremented)
    def _h(ev: rv.Envelope[Incremented]) -> None:
        reads_at[ev.offset] = len(asked)

    app.collect(effect)
    store: Any = app.store
    for name in ("read_columns", "read"):
        real = getattr(store, name)

        async def spy(topic: str, start: int, *a: Any, _real: Any = real, **k: Any) -> Any:
            if start not in asked:  # (one read may go on to the other: counted once)
                asked.append(start)
            return await _real(topic, start, *a, **k)

        setattr(store, name, spy)
    await app.start()
    try:
        await app.settle(timeout=60)
        assert len(reads_at) == AGGREGATES * EACH
        # when the first page's first event was handled, that page and the two after it
        # (a whole topic of one partition is read two pages ahead) were asked for
        assert reads_at[1] >= 3 and asked[:3] == [1, 51, 101]
        assert await stored_checkpoint(app, "reads") == AGGREGATES * EACH
    finally:
        await app.stop()
