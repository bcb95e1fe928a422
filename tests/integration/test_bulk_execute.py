"""``execute_many``'s bulk path: decided in one go, appended together, nothing lost.

Every claim is checked by reading the store back (rows, versions, offsets, snapshots),
on a SQLite file and on PostgreSQL; a second App on the same store plays the other
process whose writes make the first one's states stale.
"""

from __future__ import annotations

import asyncio
import gc
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated, Any
from uuid import UUID

import pytest
from pydantic import BaseModel, Field

import reventless as rv
from reventless.store import arrowhelper, arrowread, require_sql
from reventless.store.arrowread import ArrowPages
from reventless.testing.store_suite import Account, Deposit, Deposited, Withdraw
from tests.arrow_pages import counting, helpers_ready, rows_only


async def rows(app: rv.App, sql: str) -> list[tuple[Any, ...]]:
    store = require_sql(app.store, "the test")
    return await store.db.read(lambda conn: [tuple(r) for r in conn.exec_driver_sql(sql).all()])


async def stored(app: rv.App) -> list[tuple[str, int, int, int]]:
    """(aggregate, version, offset, amount) of every stored event, in offset order."""
    table = require_sql(app.store, "the test").table_of("Account")
    return [
        (a, v, o, amount)
        for a, v, o, amount in await rows(
            app, f"SELECT _aggregate_id, _version, _offset, amount FROM {table} ORDER BY _offset"
        )
    ]


async def test_results_are_what_landed_and_order_holds_per_aggregate(shared_url: str) -> None:
    app = rv.App(store=shared_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=5)))
    log = app.event_log(Account)
    async with app:
        await log.execute("old", Deposit(amount=10))
        items: list[tuple[str, rv.Command]] = [("old", Withdraw(amount=4))]
        items += [(f"n-{i % 7}", Deposit(amount=i + 1)) for i in range(70)]
        items += [("old", Withdraw(amount=50)), ("old", Deposit(amount=1))]
        got = await log.execute_many(items)
        assert isinstance(got[-2], rv.Rejected)  # decided on the state the bulk left
        landed = await stored(app)
        assert [o for _, _, o, _ in landed] == list(range(1, len(landed) + 1))  # gapless
        by_offset = {o: (a, v, amount) for a, v, o, amount in landed}
        for (aggregate, cmd), res in zip(items, got, strict=True):
            if isinstance(res, rv.Rejected):
                continue
            assert res.first_offset == res.last_offset
            a, v, amount = by_offset[res.first_offset]
            assert (a, v) == (aggregate, res.version)
            assert amount == cmd.amount  # type: ignore[attr-defined]
        for k in range(7):  # each aggregate's deposits in input order, in one append
            mine = [amount for a, _, _, amount in landed if a == f"n-{k}"]
            assert mine == [i + 1 for i in range(k, 70, 7)]
            offsets = [o for a, _, o, _ in landed if a == f"n-{k}"]
            assert offsets == list(range(offsets[0], offsets[0] + 10))
        # the snapshots crossed on the way were stored in the appends' transactions
        snaps = dict(await rows(app, "SELECT aggregate_id, version FROM rv_snapshots"))
        assert snaps == {f"n-{k}": 10 for k in range(7)}
        log.forget()
        assert (await log.load("old")).balance == 10 - 4 + 1
        assert (await log.load("n-3")).balance == sum(i + 1 for i in range(3, 70, 7))


async def test_the_cache_keeps_the_states_a_bulk_window_touched_last(file_url: str) -> None:
    """A window's states go into the cache (least recently used first out) as one command
    at a time would leave them: an aggregate it touched moves to the end, the oldest go
    when it is full, and a state whose append failed is not kept."""
    app = rv.App(store=file_url, options=rv.AppOptions(log=rv.LogOptions(cache_size=5)))
    log = app.event_log(Account)
    other = rv.App(store=file_url)
    elsewhere = other.event_log(Account)
    async with app, other:
        for name in ("a", "b", "c"):
            await log.execute(name, Deposit(amount=1))
        await elsewhere.execute("c", Deposit(amount=1))  # the state cached here is stale
        items: list[tuple[str, rv.Command]] = [("a", Deposit(amount=1)), ("c", Deposit(amount=1))]
        items += [(f"n-{i}", Deposit(amount=1)) for i in range(3)]
        got = await log.execute_many(items)
        assert all(isinstance(r, rv.ExecuteResult) for r in got)
        # "c" failed in bulk and ran again the careful way, which cached it last
        assert list(log._cache) == ["a", "n-0", "n-1", "n-2", "c"]
        await log.execute_many([(f"m-{i}", Deposit(amount=1)) for i in range(7)])
        assert list(log._cache) == [f"m-{i}" for i in range(2, 7)]
        assert [s.version for s in log._cache.values()] == [1] * 5


async def test_a_state_made_stale_by_another_process_is_retried(shared_url: str) -> None:
    first, other = rv.App(store=shared_url), rv.App(store=shared_url)
    log, theirs = first.event_log(Account), other.event_log(Account)
    async with first, other:
        for k in range(3):
            await log.execute(f"s-{k}", Deposit(amount=1))  # cached at version 1
        await theirs.execute("s-1", Deposit(amount=100))  # behind first's cache: version 2
        items: list[tuple[str, rv.Command]] = [
            (f"s-{k}", Deposit(amount=10 * (j + 1))) for j in range(3) for k in range(3)
        ]
        got = await log.execute_many(items)
        assert all(isinstance(r, rv.ExecuteResult) for r in got)
        landed = await stored(first)
        s1 = [(v, amount) for a, v, _, amount in landed if a == "s-1"]
        # s-1's bulk append clashed as a whole; its commands ran again on the fresh state
        assert s1 == [(1, 1), (2, 100), (3, 10), (4, 20), (5, 30)]
        assert [r.version for r in got if isinstance(r, rv.ExecuteResult)][1::3] == [3, 4, 5]
        for k in (0, 2):
            assert [v for a, v, _, _ in landed if a == f"s-{k}"] == [1, 2, 3, 4]
        log.forget()
        assert (await log.load("s-1")).balance == 1 + 100 + 60


async def test_command_ids_and_held_turns_go_the_careful_way_in_order(file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Account)
    async with app:
        items: list[tuple[str, rv.Command] | tuple[str, rv.Command, str | None]] = [
            ("c-1", Deposit(amount=1)),
            ("c-1", Deposit(amount=2), "cmd-2"),  # needs its record looked up
            ("c-1", Deposit(amount=3)),  # after it, on the same aggregate
            ("c-2", Deposit(amount=4)),
        ]
        got = await log.execute_many(items)
        assert [r.version for r in got if isinstance(r, rv.ExecuteResult)] == [1, 2, 3, 1]
        again = await log.execute_many([("c-1", Deposit(amount=2), "cmd-2")])
        assert isinstance(again[0], rv.ExecuteResult) and again[0].duplicate
        assert [(a, amount) for a, _, _, amount in await stored(app)] == [
            ("c-1", 1),
            ("c-2", 4),
            ("c-1", 2),
            ("c-1", 3),
        ]


async def test_a_failed_append_stores_no_snapshot(shared_url: str) -> None:
    every2 = rv.AppOptions(log=rv.LogOptions(snapshot_every=2))
    first = rv.App(store=shared_url, options=every2)
    other = rv.App(store=shared_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=0)))
    log, theirs = first.event_log(Account), other.event_log(Account)
    async with first, other:
        await log.execute("a", Deposit(amount=1))  # cached at version 1
        await theirs.append("a", [Deposited(amount=5)], expected_version=1)
        # version 2 is due a snapshot: first's attempt (on its stale state) clashes and
        # stores none; the retry lands at version 3, where none is due
        res = await log.execute("a", Deposit(amount=1))
        assert res.version == 3
        assert await rows(first, "SELECT version FROM rv_snapshots") == []
        await log.execute("a", Deposit(amount=1))  # version 4: stored with the event
        assert await rows(first, "SELECT version, state FROM rv_snapshots") == [
            (4, Account(id="a", version=4, balance=8).model_dump_json())
        ]
        snap, tail = await first.store.load("Account", "a")
        assert snap is not None and snap[0] == 4 and tail == []
        log.forget()
        assert (await log.load("a")).balance == 8


@pytest.mark.parametrize("n", [1, 10])
async def test_execute_crossing_a_snapshot_keeps_the_cached_state(file_url: str, n: int) -> None:
    app = rv.App(store=file_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=3)))
    log = app.event_log(Account)
    async with app:
        for _ in range(n):
            res = await log.execute("a", Deposit(amount=2))
        assert res.version == n
        cached = await log.load("a")
        assert (cached.version, cached.balance) == (n, 2 * n)
        expected = (n // 3) * 3
        assert await rows(app, "SELECT version FROM rv_snapshots") == (
            [(expected,)] if expected else []
        )


async def test_append_many_lands_each_item_or_fails_it_alone(shared_url: str) -> None:
    app = rv.App(store=shared_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=3)))
    log = app.event_log(Account)
    async with app:
        await log.execute("old", Deposit(amount=7))
        items: list[tuple[str, list[rv.Event], int]] = [
            (f"a-{i}", [Deposited(amount=i), Deposited(amount=1)], 0) for i in range(300)
        ]
        items.insert(5, ("old", [Deposited(amount=9999)], 0))  # old is at version 1
        items.append(("old", [Deposited(amount=2), Deposited(amount=3)], 1))
        got = await log.append_many(items)
        assert isinstance(got[5], rv.ConcurrencyError)
        landed = await stored(app)
        assert len(landed) == 1 + 600 + 2 and 9999 not in [amount for *_, amount in landed]
        by_offset = {o: (a, v, amount) for a, v, o, amount in landed}
        for (aggregate, events, version), res in zip(items, got, strict=True):
            if isinstance(res, rv.ConcurrencyError):
                continue
            assert [by_offset[o] for o in range(res.first_offset, res.last_offset + 1)] == [
                (aggregate, version + k + 1, e.amount)  # type: ignore[attr-defined]
                for k, e in enumerate(events)
            ]
        # old went from 1 to 3 (a multiple of snapshot_every): the policy stored one
        assert await rows(app, "SELECT aggregate_id, version FROM rv_snapshots") == [("old", 3)]
        assert (await log.load("old")).balance == 12
        with pytest.raises(rv.StoreError):  # not an event of the log: nothing written
            await log.append_many([("x", [rv.Event()], 0)])
        assert len(await stored(app)) == 603


async def test_a_cancelled_append_many_still_lands_and_the_store_goes_on(
    shared_url: str,
) -> None:
    # The caller of a bulk append is cancelled while its requests sit in the group-commit
    # queue (more than one group's worth): the queued appends land all the same, as a
    # cancelled ``append``'s does, and the queue keeps serving later appends.
    app = rv.App(store=shared_url)
    log = app.event_log(Account)
    async with app:
        items: list[tuple[str, list[rv.Event], int]] = [
            (f"c-{i}", [Deposited(amount=1)], 0) for i in range(4500)
        ]
        task = asyncio.create_task(log.append_many(items))
        while not task.done() and not require_sql(app.store, "the test")._pending:
            await asyncio.sleep(0)  # until the requests are queued
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        res = await asyncio.wait_for(
            log.append("after", [Deposited(amount=5)], expected_version=0), 30
        )
        landed = await stored(app)
        assert [o for _, _, o, _ in landed] == list(range(1, 4502))  # gapless, all of them
        assert {a for a, *_ in landed} == {f"c-{i}" for i in range(4500)} | {"after"}
        assert res.first_offset == 4501


class Inner(BaseModel):
    name: str
    sizes: list[int] = []


class Noted(rv.Event):
    blob: bytes | None = None
    flag: bool | None = None
    ratio: float | None = None
    text: str | None = None
    items: list[int] | None = None
    when: datetime | None = None
    day: date | None = None
    at: time | None = None
    span: timedelta | None = None
    amount: Annotated[Decimal, Field(max_digits=12, decimal_places=2)] | None = None
    uid: UUID | None = None
    inner: Inner | None = None


class Notes(rv.Aggregate):
    events = Noted
    seen: list[Noted] = []

    @rv.applies(Noted)
    def _noted(self, e: Noted) -> None:
        self.seen = [*self.seen, e]


@pytest.mark.parametrize("n", [1, 3, 4, 16])
async def test_one_append_of_any_size_round_trips_every_kind_of_value(any_url: str, n: int) -> None:
    """A lone append (one statement on PostgreSQL: values bound one by one up to 3 rows,
    as column arrays beyond) stores bytes, bools, floats, text and JSON, nulls included."""
    app = rv.App(store=any_url)
    log = app.event_log(Notes)
    events = [
        Noted(
            blob=None if k % 3 == 0 else bytes([k, 0, 255]),
            flag=None if k % 4 == 1 else k % 2 == 0,
            ratio=None if k % 5 == 2 else k / 7,
            text=None if k % 2 else f"n{k} ' \" \\ {{}}",
            items=None if k % 3 == 1 else list(range(k)),
        )
        for k in range(n)
    ]
    async with app:
        res = await log.append("notes", events, expected_version=0)
        assert (res.first_offset, res.last_offset) == (1, n)
        log.forget()
        assert (await log.load("notes")).seen == events
        assert [e.event for e in await log.read(limit=100)] == events


@pytest.mark.parametrize("n", [1, 2500])
async def test_read_batches_as_arrow_equal_batches_built_from_rows(
    any_url: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages read straight into Arrow (ADBC, where the store has a driver) hold what the
    same pages built from SQL rows hold: every kind of value, nulls, pages of one storage
    class per column and of none (all NULL)."""
    app = rv.App(store=any_url)
    log = app.event_log(Notes)
    events = [
        Noted(
            blob=None if k % 3 == 0 or k < 1100 else bytes([k % 256, 0, 255]),
            flag=None if k % 4 == 1 else k % 2 == 0,
            ratio=None if k % 5 == 2 else k / 7,
            text=None if k % 2 or k < 1500 else f"n{k} ' \" \\ {{}}",
            items=None if k % 3 == 1 else list(range(k % 5)),
            when=None if k % 6 == 0 else datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=k),
            day=None if k % 7 == 0 else date(2026, 1, 1) + timedelta(days=k % 300),
            at=None if k % 8 == 0 else time(k % 24, k % 60, 0, k),
            span=None if k % 9 == 0 else timedelta(milliseconds=k),
            amount=None if k % 10 == 0 else Decimal(k) / 4,
            uid=None if k % 11 == 0 else UUID(int=k),
            inner=None if k % 12 == 0 else Inner(name=f"i{k}", sizes=[k, k + 1]),
        )
        for k in range(n)
    ]
    tables = counting(monkeypatch)
    async with app:
        await log.append_many([(f"n-{k}", [e], 0) for k, e in enumerate(events)])
        await helpers_ready(app)
        arrow = [b async for b in log.read_batches(batch_size=1000)]
        monkeypatch.setattr(type(app.store), "stream_columns", rows_only)
        rows = [b async for b in log.read_batches(batch_size=1000)]
    assert [b.num_rows for b in arrow] == [b.num_rows for b in rows]
    assert sum(b.num_rows for b in rows) == n
    for a, r in zip(arrow, rows, strict=True):
        assert a.schema == r.schema and a.equals(r)
    # a file (its helper processes) or a server: every page came as Arrow (memory: no
    # driver can share it)
    memory = any_url == "sqlite://"
    assert sorted(tables) == ([] if memory else [1] if n == 1 else [500, 1000, 1000])


async def test_a_page_the_driver_cannot_read_comes_as_rows(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page that fails as Arrow (values of mixed storage classes, a lost connection) is
    read as rows: the batches are the same, none is missing or repeated."""
    app = rv.App(store=shared_url)
    log = app.event_log(Notes)
    page = ArrowPages.page

    def failing(self: ArrowPages, sql: str, rows: int, *more: Any) -> Any:
        out = page(self, sql, rows, *more)  # (a page a helper was asked for is answered)
        return None if "_offset >= 1001 " in sql else out

    monkeypatch.setattr(ArrowPages, "page", failing)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k / 3)], 0) for k in range(2100)])
        await helpers_ready(app)
        batches = [b async for b in log.read_batches(batch_size=1000)]
    assert [b.num_rows for b in batches] == [1000, 1000, 100]
    offsets = [o for b in batches for o in b.column("_offset").to_pylist()]
    assert offsets == list(range(1, 2101))
    assert [r for b in batches for r in b.column("ratio").to_pylist()] == [
        k / 3 for k in range(2100)
    ]


@pytest.mark.postgres
async def test_a_driver_that_cannot_connect_leaves_reads_to_rows(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The helpers' connection string names a database that does not exist: each helper
    exits at its start, and the reads go through rows (and say so)."""
    real = arrowread.conninfo
    monkeypatch.setattr(
        arrowread, "conninfo", lambda db: real(db) + " dbname='rv_no_such_database'"
    )
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 1)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 1)
    pages = counting(monkeypatch)
    app = rv.App(store=pg_url)
    log = app.event_log(Notes)
    async with app:
        await log.append_many([(f"n-{k}", [Noted(ratio=k / 3)], 0) for k in range(1500)])
        batches = [b async for b in log.read_batches(batch_size=1000)]
    assert [b.num_rows for b in batches] == [1000, 500]
    assert [r for b in batches for r in b.column("ratio").to_pylist()] == [
        k / 3 for k in range(1500)
    ]
    assert pages == [-1, -1]
    assert "Arrow reads go through rows" in caplog.text


class Probe(rv.Command):
    """Records whether the cyclic collector is on while the command is decided."""


class Probed(rv.Event):
    collecting: bool


class Prober(rv.Aggregate):
    events = Probed
    seen: list[bool] = Field(default_factory=list)

    @rv.handles(Probe)
    def probe(self, cmd: Probe) -> Probed:
        return Probed(collecting=gc.isenabled())

    @rv.applies(Probed)
    def _probed(self, e: Probed) -> None:
        self.seen.append(e.collecting)


async def test_the_collector_is_held_off_for_a_bulk_window_and_back_after(file_url: str) -> None:
    """``execute_many`` decides a window with the cyclic collector off (``bulk_gc_pause``)
    and turns it back on after, also when a command raised; one that was off before
    stays off; the careful path and ``execute`` leave it alone."""
    app = rv.App(store=file_url)
    log = app.event_log(Prober)
    async with app:
        assert gc.isenabled()
        got = await log.execute_many([(f"p-{i}", Probe()) for i in range(3)])
        assert [r.events[0].collecting for r in got if isinstance(r, rv.ExecuteResult)] == [
            False
        ] * 3
        assert gc.isenabled()
        careful = await log.execute_many([("p-0", Probe(), "cmd-1")])  # a command id
        assert isinstance(careful[0], rv.ExecuteResult) and careful[0].events[0].collecting
        gc.disable()
        try:
            await log.execute_many([("p-9", Probe())])
            assert not gc.isenabled()  # as the caller left it
        finally:
            gc.enable()
        with pytest.raises(rv.UnhandledCommandError):
            await log.execute_many([("p-1", Deposit(amount=1))])
        assert gc.isenabled()
        table = require_sql(app.store, "the test").table_of("Prober")
        stored_probes = await rows(app, f"SELECT collecting FROM {table} ORDER BY _offset")
        assert [bool(c) for (c,) in stored_probes] == [False, False, False, True, False]
    off = rv.App(store=file_url, options=rv.AppOptions(log=rv.LogOptions(bulk_gc_pause=False)))
    log = off.event_log(Prober)
    async with off:
        [res] = await log.execute_many([("q", Probe())])
        assert isinstance(res, rv.ExecuteResult) and res.events[0].collecting


def test_overlapping_pauses_turn_the_collector_back_on_once() -> None:
    """Two windows under way at once (two callers on one loop): the collector comes
    back when the last one ends, not the first."""
    from reventless.bulk import collector_paused

    assert gc.isenabled()
    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    assert not gc.isenabled()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


async def test_concurrent_bulk_calls_leave_the_collector_on(file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Account)
    async with app:
        calls = [
            log.execute_many([(f"c{k}-{i}", Deposit(amount=1)) for i in range(1500)])
            for k in range(4)
        ]
        results = await asyncio.gather(*calls)
        assert all(isinstance(r, rv.ExecuteResult) for got in results for r in got)
        assert gc.isenabled()
        assert len(await stored(app)) == 6000
