"""A batch that moves only its checkpoint (side effects, batch handlers).

On a SQLite file it commits on the event loop's thread when the write lock is free and
no other task is ready, as a lone append does (``SqlCollectorStore.commit``), else it
goes through the writer in plain BEGIN and COMMIT; on PostgreSQL its one statement is
its own transaction, sent from the event loop through libpq on a connection of its own
(``SqlCollectorStore.lean_write``: no BEGIN or COMMIT, no hop to the writer thread).
Either way: the stored checkpoint (read back from the store) is what landed, a batch
that starts behind the stored checkpoint is refused with ``CheckpointMovedError`` and
writes nothing, and a write the database refuses is a typed ``StoreError`` that leaves
the stored checkpoint as it was.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.errors import CheckpointMovedError
from reventless.store.collector import Progress
from tests.integration.test_postgres import kill_connections
from tests.model import Counter, Increment, Incremented


class Writes:
    """Counts the store's hand-offs to its writer thread: transactions
    (``Database.write``) and statements of their own (``Database.write_statement``)."""

    def __init__(self, db: Any) -> None:
        self.calls = 0
        self.statements = 0
        self._write = db.write
        self._statement = db.write_statement

        async def write(fn: Any) -> Any:
            self.calls += 1
            return await self._write(fn)

        async def statement(fn: Any) -> Any:
            self.statements += 1
            return await self._statement(fn)

        db.write = write
        db.write_statement = statement


async def test_checkpoint_only_commits_land_once_and_refuse_a_moved_start(any_url: str) -> None:
    app = rv.App(store=any_url)
    app.event_log(Counter)
    async with app:
        collectors = app.store.collectors
        writes = Writes(app.store.db)  # type: ignore[attr-defined]
        assert await collectors.commit("side", Progress("Counter", 0, 5, after=0))
        with pytest.raises(CheckpointMovedError) as moved:  # the same batch again
            await collectors.commit("side", Progress("Counter", 0, 7, after=0))
        assert moved.value.stored == 5
        assert (await collectors.load("side"))[0] == {("Counter", 0): 5}
        assert await collectors.commit("side", Progress("Counter", 0, 8, after=5))
        assert await collectors.commit("side", Progress("Counter", 1, 3))  # no ``after``
        assert (await collectors.load("side"))[0] == {("Counter", 0): 8, ("Counter", 1): 3}
        # four commits, none through a SQLAlchemy transaction: on a SQLite file some
        # commit on the loop's thread (each one that finds no other task ready), the
        # others on the writer (plain BEGIN and COMMIT); in memory every one goes through
        # the writer; on PostgreSQL each is a statement of its own sent from the event
        # loop through libpq (``SqlCollectorStore.lean_write``), none through the writer
        assert writes.calls == 0
        if any_url.startswith("postgresql"):
            assert writes.statements == 0
        elif any_url.startswith("sqlite:///") and ":memory:" not in any_url:
            assert writes.statements < 4, writes.statements
        else:
            assert writes.statements == 4


async def test_a_checkpoint_commit_the_file_refuses_is_a_store_error(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    fast = rv.AppOptions(store=rv.StoreOptions(busy_timeout_ms=50))  # a locked file fails
    app = rv.App(store=f"sqlite:///{db}", options=fast)
    app.event_log(Counter)
    async with app:
        collectors = app.store.collectors
        assert await collectors.commit("side", Progress("Counter", 0, 4, after=0))
        other = sqlite3.connect(db, isolation_level=None)  # another process's writer
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(rv.StoreError):
                await collectors.commit("side", Progress("Counter", 0, 9, after=4))
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert (await collectors.load("side"))[0] == {("Counter", 0): 4}
        assert await collectors.commit("side", Progress("Counter", 0, 9, after=4))
        assert (await collectors.load("side"))[0] == {("Counter", 0): 9}


async def test_a_side_effect_catch_up_stores_the_head_as_its_checkpoint(file_url: str) -> None:
    app = rv.App(store=file_url)  # the log first, then a fresh side effect catches up
    log = app.event_log(Counter)
    seen: list[int] = []
    side = rv.SideEffectHandler("seen")

    @side.on(Incremented)
    async def _seen(ev: rv.Envelope[Incremented]) -> None:
        seen.append(ev.offset)

    async with app:
        for i in range(50):
            await log.execute(f"c{i % 3}", Increment(by=1))
    app = rv.App(store=file_url, options=rv.AppOptions(collector=rv.CollectorOptions(page_size=7)))
    app.event_log(Counter)
    app.collect(side)
    async with app:
        await app.settle(timeout=30)
        stored = (await app.store.collectors.load("seen"))[0]
    assert sorted(seen) == list(range(1, 51))  # each once
    assert stored == {("Counter", 0): 50}


async def test_a_checkpoint_statement_on_a_killed_connection_is_a_store_error(
    pg_url: str,
) -> None:
    """PostgreSQL: the checkpoint's statement on a connection the server killed is a
    typed ``StoreError`` that leaves the stored checkpoint as it was, and the next
    commit, on a new connection, lands (read back from the table)."""
    app = rv.App(store=pg_url)
    app.event_log(Counter)
    async with app:
        collectors = app.store.collectors
        assert await collectors.commit("side", Progress("Counter", 0, 4, after=0))
        kill_connections(app.store.db.url.database)  # type: ignore[attr-defined]
        with pytest.raises(rv.StoreError):
            await collectors.commit("side", Progress("Counter", 0, 9, after=4))
        assert (await collectors.load("side"))[0] == {("Counter", 0): 4}
        assert await collectors.commit("side", Progress("Counter", 0, 9, after=4))
        assert (await collectors.load("side"))[0] == {("Counter", 0): 9}
