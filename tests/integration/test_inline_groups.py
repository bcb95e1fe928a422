"""A SQLite file's small group commits run on the event loop's thread when nothing else
waits to run there (``SqlEventStore._inline_group``); a large group, a group with company
and a store with ``inline_writes=False`` go to the writer thread. Either way every
request lands or fails alone, read back from the store."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.store import require_sql
from reventless.store.append import AppendResult
from reventless.store.sql import _INLINE_ROWS, SqlEventStore
from reventless.testing.store_suite import Account, Deposited
from tests.company import company

Groups = list[tuple[int, bool]]  # (requests, on the loop's thread)


def watch_groups(store: SqlEventStore) -> Groups:
    """Record each group commit's size and whether it ran on the calling thread."""
    seen: Groups = []
    loop_thread = threading.get_ident()
    group = store._appender.group

    def recorded(cur: Any, reqs: list[Any]) -> Any:
        seen.append((len(reqs), threading.get_ident() == loop_thread))
        return group(cur, reqs=reqs)

    store._appender.group = recorded  # type: ignore[method-assign]
    return seen


@contextlib.asynccontextmanager
async def watched(
    tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[rv.EventLog[Account], SqlEventStore, Groups]]:
    """A started App on a SQLite file (``options``: its store's), its log, its store and
    the group commits it makes."""
    app = rv.App(
        store=f"sqlite:///{tmp_path / 'store.db'}",
        options=rv.AppOptions(store=rv.StoreOptions(**options)),
    )
    log = app.event_log(Account)
    async with app:
        store = require_sql(app.store, "the test")
        yield log, store, watch_groups(store)


async def stored(store: SqlEventStore) -> list[tuple[str, int, int]]:
    table = store.table_of("Account")
    rows = await store.db.read(
        lambda conn: conn.exec_driver_sql(
            f"SELECT _aggregate_id, _version, _offset FROM {table} ORDER BY _offset"
        ).all()
    )
    return [tuple(r) for r in rows]


async def deposit_rounds(log: rv.EventLog[Account], streams: int, rounds: int) -> None:
    """``streams`` concurrent streams of ``rounds`` appends each (one event each)."""

    async def stream(i: int) -> None:
        for v in range(rounds):
            await log.append(f"s-{i:03d}", [Deposited(amount=1)], expected_version=v)

    await asyncio.gather(*(stream(i) for i in range(streams)))


async def test_groups_of_concurrent_appends_commit_on_the_loop_thread(tmp_path: Path) -> None:
    async with watched(tmp_path) as (log, store, seen):
        await deposit_rounds(log, 64, 5)
        grouped = [on_loop for size, on_loop in seen if size > 1]
        # (a group whose loop had other work ready, a timer come due, went to the thread)
        assert len(grouped) >= 4 and sum(grouped) >= 1
        rows = await stored(store)
    assert [o for _, _, o in rows] == list(range(1, 64 * 5 + 1))  # gapless
    for i in range(64):
        assert [v for a, v, _ in rows if a == f"s-{i:03d}"] == [1, 2, 3, 4, 5]


async def test_a_clash_in_an_inline_group_fails_only_its_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the group inline whatever else is ready: a timer come due would send it to the thread)
    monkeypatch.setattr(SqlEventStore, "_inline_group", staticmethod(lambda reqs: True))
    async with watched(tmp_path) as (log, store, seen):
        await log.append_many((f"a-{i}", [Deposited(amount=1)], 0) for i in range(40))
        seen.clear()
        stale = 17

        async def one(i: int) -> AppendResult | Exception:
            try:
                return await log.append(
                    f"a-{i}", [Deposited(amount=2)], expected_version=0 if i == stale else 1
                )
            except rv.ConcurrencyError as exc:
                return exc

        got = await asyncio.gather(*(one(i) for i in range(40)))
        assert [i for i, r in enumerate(got) if isinstance(r, Exception)] == [stale]
        assert seen == [(40, True)]
        rows = await stored(store)
    assert [o for _, _, o in rows] == list(range(1, 40 + 39 + 1))
    assert {a for a, v, _ in rows if v == 2} == {f"a-{i}" for i in range(40) if i != stale}


async def test_a_group_over_the_row_limit_goes_to_the_writer_thread(tmp_path: Path) -> None:
    async with watched(tmp_path) as (log, store, seen):
        n = _INLINE_ROWS + 1
        got = await log.append_many((f"b-{i}", [Deposited(amount=1)], 0) for i in range(n))
        assert all(isinstance(r, AppendResult) for r in got)
        assert seen == [(n, False)]
        assert len(await stored(store)) == n


async def test_a_group_with_company_goes_to_the_writer_thread(tmp_path: Path) -> None:
    async with watched(tmp_path) as (log, store, seen):
        async with company():  # the loop is never alone
            await deposit_rounds(log, 16, 3)
        grouped = [on_loop for size, on_loop in seen if size > 1]
        assert grouped and not any(grouped)
        assert len(await stored(store)) == 16 * 3


async def test_inline_writes_off_keeps_every_group_on_the_writer_thread(tmp_path: Path) -> None:
    async with watched(tmp_path, inline_writes=False) as (log, store, seen):
        await deposit_rounds(log, 32, 3)
        assert seen and not any(on_loop for _, on_loop in seen)
        assert len(await stored(store)) == 32 * 3
