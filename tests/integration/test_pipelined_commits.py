"""A side-effect catch-up commits each page while it handles the next one.

``Collector.pipelined`` kinds (side effects, mappers) hand a page's commit to the store
and go on with the next page; that commit lands before the next one starts, and only
then does the in-memory checkpoint move. PostgreSQL's collector store asks for it
(``CollectorStore.overlap_commits``), SQLite's does not (there a checkpoint commit runs
on the loop's thread), and ``CollectorOptions.overlap_commits`` overrides the store.
``Overlapping`` makes any store ask for it, so the collector's side runs on every store
kind, and lets a test hold, fail or lose one commit.

Proved by reading the store: the commits land in page order, each from where the one
before it ended; the overlap is real (a page's commit is held until the next page's
first event was handled); a commit that fails before or after it landed leaves no gap,
and the events of the pages it covered come again (at least once, never skipped).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

import pytest

import reventless as rv
from reventless.store.collector import CollectorStore, Progress
from tests.model import Counter, Increment, Incremented

PAGE = 5
EVENTS = 20


class Overlapping:
    """A ``CollectorStore`` that overlaps commits (``overlap_commits``) and records the
    checkpoint commits that landed; ``hold`` keeps a commit (by the checkpoint it moves
    to) waiting until its event is set, ``fail`` makes one raise before it lands and
    ``lose`` after it landed (a lost answer)."""

    overlap_commits = True

    def __init__(self, inner: CollectorStore) -> None:
        self.inner = inner
        #: (checkpoint, the checkpoint it started from) of each commit that landed.
        self.landed: list[tuple[int, int | None]] = []
        self.hold: dict[int, asyncio.Event] = {}
        self.fail: set[int] = set()
        self.lose: set[int] = set()
        #: Called as each checkpoint commit starts.
        self.on_start: Callable[[], None] = lambda: None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit(self, component: str, progress: Progress | None, **kw: Any) -> bool:
        if progress is None:
            return await self.inner.commit(component, progress, **kw)
        self.on_start()
        gate = self.hold.pop(progress.offset, None)
        if gate is not None:
            await gate.wait()
        if progress.offset in self.fail:
            self.fail.discard(progress.offset)
            raise rv.StoreError("store write failed: injected before the commit")
        done = await self.inner.commit(component, progress, **kw)
        self.landed.append((progress.offset, progress.after))
        if progress.offset in self.lose:
            self.lose.discard(progress.offset)
            raise rv.StoreError("store write failed: server closed the connection")
        return done


def _app(url: str, overlap: bool | None = None) -> tuple[rv.App, list[int]]:
    """An App whose side effect records the offset of every ``Incremented`` it handles.
    Its broker hears nothing of what ``_append`` writes: its collector catches up from
    the store alone, in pages of ``PAGE`` from the checkpoint."""
    app = rv.App(
        store=url,
        options=rv.AppOptions(
            collector=rv.CollectorOptions(
                page_size=PAGE, poll_interval=0.05, grace=0.0, overlap_commits=overlap
            )
        ),
    )
    app.event_log(Counter)
    seen: list[int] = []
    effects = rv.SideEffectHandler("effects")

    @effects.on(Incremented)
    async def _(ev: rv.Envelope[Incremented]) -> None:
        seen.append(ev.offset)

    app.collect(effects)
    return app, seen


async def _append(url: str) -> None:
    """``EVENTS`` events, from another App (another broker) on the same store."""
    writer = rv.App(store=url)
    log = writer.event_log(Counter)
    async with writer:
        for i in range(EVENTS):
            await log.execute(f"c{i}", Increment(by=1))


async def _stored(app: rv.App) -> int:
    checkpoints, _ = await app.store.collectors.load("effects")
    return checkpoints.get(("Counter", 0), 0)


async def test_a_page_commits_while_the_next_page_is_handled(shared_url: str) -> None:
    app, seen = _app(shared_url)
    async with app:
        effects = app.collector("effects")
        store = Overlapping(app.store.collectors)
        app.store.collectors = store  # type: ignore[misc]
        # The first page's commit waits until the second page's first event is handled:
        # without the overlap the catch-up would wait for that commit and never get there.
        second = asyncio.Event()
        store.hold[PAGE] = second

        async def watch() -> None:
            while PAGE + 1 not in seen:
                await asyncio.sleep(0.001)
            second.set()

        watcher = asyncio.create_task(watch())
        effects.pause()  # the poll's catch-up starts once the backlog is whole
        await _append(shared_url)
        effects.resume()
        await app.settle(timeout=30)
        await asyncio.wait_for(watcher, 10)
        assert collections.Counter(seen) == dict.fromkeys(range(1, EVENTS + 1), 1)
        assert await _stored(app) == EVENTS
        assert store.landed == [(p, p - PAGE) for p in range(PAGE, EVENTS + 1, PAGE)]


@pytest.mark.parametrize("how", ["fail", "lose"])
async def test_a_failed_commit_behind_a_page_leaves_no_gap(shared_url: str, how: str) -> None:
    """The second page's commit fails (``fail``: nothing landed; ``lose``: it landed, its
    answer lost) and that surfaces after the third page was handled. The catch-up stops;
    the next poll goes on from the checkpoint it knows (the first page's). Every event is
    handled, the second and third pages twice, and the commits that landed follow each
    other without a gap: the refused repeat of a lost answer's commit counts as landed,
    so the third page is not handled a third time."""
    app, seen = _app(shared_url)
    async with app:
        effects = app.collector("effects")
        store = Overlapping(app.store.collectors)
        app.store.collectors = store  # type: ignore[misc]
        getattr(store, how).add(2 * PAGE)
        effects.pause()
        await _append(shared_url)
        effects.resume()
        await app.settle(timeout=30)
        assert await _stored(app) == EVENTS
        handled = collections.Counter(seen)
        assert set(handled) == set(range(1, EVENTS + 1))  # nothing skipped
        assert {o for o, n in handled.items() if n > 1} == set(range(PAGE + 1, 3 * PAGE + 1))
        assert max(handled.values()) == 2
        assert store.landed == [(p, p - PAGE) for p in range(PAGE, EVENTS + 1, PAGE)]


async def test_sqlite_commits_one_page_at_a_time_and_postgres_overlaps(any_url: str) -> None:
    app, _ = _app(any_url)
    async with app:
        assert app.store.collectors.overlap_commits is any_url.startswith("postgresql")


async def test_the_collector_option_overrides_the_store(shared_url: str) -> None:
    """``overlap_commits=False`` on a store that overlaps: each page's commit starts
    before any event of the next page is handled, and each lands before the next."""
    app, seen = _app(shared_url, overlap=False)
    async with app:
        effects = app.collector("effects")
        store = Overlapping(app.store.collectors)
        app.store.collectors = store  # type: ignore[misc]
        started: list[int] = []
        store.on_start = lambda: started.append(max(seen, default=0))
        effects.pause()
        await _append(shared_url)
        effects.resume()
        await app.settle(timeout=30)
        assert started == list(range(PAGE, EVENTS + 1, PAGE))
        assert store.landed == [(p, p - PAGE) for p in range(PAGE, EVENTS + 1, PAGE)]
        assert collections.Counter(seen) == dict.fromkeys(range(1, EVENTS + 1), 1)
