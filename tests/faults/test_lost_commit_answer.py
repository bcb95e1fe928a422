"""A collector batch whose commit landed although its answer was lost (issue 19, B2).

When the server goes down at COMMIT (a crash, an immediate shutdown, a broken
connection), the transaction may have committed while the client only sees an error.
The collector then still holds the old checkpoint and processes the batch again: before
the fix a read model applied those events twice. Now the batch's commit moves the
checkpoint only if the stored one is where the batch started (``Progress.after``); if it
is past it, ``CheckpointMovedError`` rolls the batch back and the collector goes on from
the stored checkpoint.

``LostAnswers`` reproduces the lost answer deterministically on every store kind: every
third checkpoint commit lands, then raises ``StoreError`` as the driver would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import reventless as rv
from reventless.errors import CheckpointMovedError
from reventless.store.collector import CollectorStore, Progress
from tests.model import Counter, Increment, ResetCounter, Total, totals


class LostAnswers:
    """A ``CollectorStore`` whose every ``every``-th checkpoint commit lands and then
    raises ``StoreError``, as when the connection breaks after COMMIT reached the server."""

    def __init__(self, inner: CollectorStore, every: int = 3) -> None:
        self.inner = inner
        self.every = every
        self.commits = 0
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit(self, component: str, progress: Progress | None, **kw: Any) -> bool:
        done = await self.inner.commit(component, progress, **kw)
        if progress is not None:
            self.commits += 1
            if self.commits % self.every == 0:
                self.lost += 1
                raise rv.StoreError("store write failed: server closed the connection")
        return done


async def test_a_batch_commit_refuses_a_checkpoint_that_moved_past_its_start(
    any_url: str,
) -> None:
    app = rv.App(store=any_url)
    app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        collectors = app.store.collectors
        table = app.tables["counter_totals"]

        def write(value: int) -> Any:
            def apply(rows: Any) -> list[Any]:
                rows.write({"x": Total(id="x", value=value, events=value)})
                return []

            return apply

        assert await collectors.commit(
            "counter_totals", Progress("Counter", 0, 5, after=0), rows=table, apply=write(5)
        )
        # The same batch again (its first answer lost): refused, nothing written.
        with pytest.raises(CheckpointMovedError) as moved:
            await collectors.commit(
                "counter_totals", Progress("Counter", 0, 5, after=0), rows=table, apply=write(9)
            )
        assert moved.value.stored == 5
        assert await view.get("x") == Total(id="x", value=5, events=5)
        # From the stored checkpoint it goes on; without ``after`` nothing is checked.
        assert await collectors.commit(
            "counter_totals", Progress("Counter", 0, 8, after=5), rows=table, apply=write(8)
        )
        assert await collectors.commit("counter_totals", Progress("Counter", 0, 9))
        checkpoints, _ = await collectors.load("counter_totals")
        assert checkpoints[("Counter", 0)] == 9
        assert await view.get("x") == Total(id="x", value=8, events=8)


@pytest.mark.parametrize("page_size", [1, 7])
async def test_lost_commit_answers_do_not_apply_events_twice(any_url: str, page_size: int) -> None:
    app = rv.App(
        store=any_url,
        options=rv.AppOptions(
            collector=rv.CollectorOptions(page_size=page_size, poll_interval=0.05)
        ),
    )
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        lossy = LostAnswers(app.store.collectors)
        app.store.collectors = lossy  # type: ignore[misc]
        view.pause()  # a backlog: catch-up pages, then live batches
        for i in range(30):
            await log.execute(f"a{i % 4}", ResetCounter() if i % 7 == 6 else Increment(by=i + 1))
        view.resume()
        for i in range(30, 60):
            await log.execute(f"a{i % 4}", ResetCounter() if i % 7 == 6 else Increment(by=i + 1))

        async def caught_up() -> bool:
            return all(v == 0 for v in (await view.lag()).values())

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not await caught_up():
            assert loop.time() < deadline, "the read model did not reach the head"
            await asyncio.sleep(0.01)
        assert lossy.lost >= 3
        states = {a: await log.load(a) for a in ("a0", "a1", "a2", "a3")}
        rows = {r.id: r for r in await view.all()}
        heads = await app.store.heads()
        assert sum(r.events for r in rows.values()) == heads["Counter"]  # each event once
        for agg, state in states.items():
            assert rows[agg].value == state.value
            assert rows[agg].events == state.version
