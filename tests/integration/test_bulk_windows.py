"""``execute_many`` in windows: each window decided in bulk, its careful commands after
it, and nothing of the order per aggregate lost from one window to the next.

The window is made small here so that a short batch spans many windows. Outcomes are
checked against a model that runs the same commands one by one, and by reading the store
back (each aggregate's events, versions and amounts; gapless offsets).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
import reventless.eventlog as eventlog
from reventless.store import require_sql
from reventless.testing.store_suite import Account, Deposit, Withdraw
from tests.integration.test_bulk_execute import rows

Item = tuple[str, rv.Command] | tuple[str, rv.Command, str | None]


async def _stored(app: rv.App) -> list[tuple[str, int, int, str, int]]:
    """(aggregate, version, offset, type, amount) of every stored event, by offset."""
    table = require_sql(app.store, "the test").table_of("Account")
    sql = f"SELECT _aggregate_id, _version, _offset, _type, amount FROM {table} ORDER BY _offset"
    return await rows(app, sql)


def _model(
    start: dict[str, tuple[int, int]], items: list[Item]
) -> tuple[list[int | None], dict[str, list[tuple[str, int]]]]:
    """The commands run one by one in input order from ``start`` (aggregate -> balance,
    version; a command id seen before answers as its first run did): each slot's version
    (None: rejected), each aggregate's new events."""
    balance = {a: b for a, (b, _) in start.items()}
    version = {a: v for a, (_, v) in start.items()}
    events: dict[str, list[tuple[str, int]]] = {}
    seen: dict[str, int | None] = {}
    out: list[int | None] = []
    for item in items:
        aggregate, command = item[0], item[1]
        command_id = item[2] if len(item) == 3 else None
        if command_id is not None and command_id in seen:
            out.append(seen[command_id])
            continue
        b = balance.get(aggregate, 0)
        if isinstance(command, Withdraw) and command.amount > b:
            got = None
        else:
            amount = command.amount  # type: ignore[attr-defined]
            kind = "Withdrawn" if isinstance(command, Withdraw) else "Deposited"
            balance[aggregate] = b - amount if kind == "Withdrawn" else b + amount
            version[aggregate] = version.get(aggregate, 0) + 1
            events.setdefault(aggregate, []).append((kind, amount))
            got = version[aggregate]
        if command_id is not None:
            seen[command_id] = got
        out.append(got)
    return out, events


_command = st.tuples(
    st.sampled_from(["a", "b", "c", "d", "e", "f"]),
    st.booleans(),  # withdraw?
    st.integers(1, 9),
    st.sampled_from([None, None, None, "x", "y", "z"]),  # a command id, sometimes repeated
)


@settings(max_examples=25)
@given(
    commands=st.lists(_command, min_size=1, max_size=40),
    window=st.integers(1, 6),
    stale=st.sets(st.sampled_from(["a", "b", "c"])),
)
def test_windows_keep_each_aggregates_order_and_land_what_a_one_by_one_run_would(
    commands: list[tuple[str, bool, int, str | None]], window: int, stale: set[str]
) -> None:
    items: list[Item] = []
    for aggregate, withdraw, amount, command_id in commands:
        # (a withdrawal decided on a stale cached state may be rejected without an append
        # that would reveal it: stale aggregates only get deposits)
        withdraw = withdraw and aggregate not in stale
        command: rv.Command = Withdraw(amount=amount) if withdraw else Deposit(amount=amount)
        # a command id names one command: its aggregate and content come with it
        if command_id is not None:
            aggregate, command = f"id-{command_id}", Deposit(amount=ord(command_id) - 100)
            items.append((aggregate, command, command_id))
        else:
            items.append((aggregate, command))

    async def run(where: Path) -> None:
        url = f"sqlite:///{where / 's.db'}"
        first, other = rv.App(store=url), rv.App(store=url)
        log, theirs = first.event_log(Account), other.event_log(Account)
        async with first, other:
            for a in ("a", "b", "c"):
                await log.execute(a, Deposit(amount=5))  # cached at version 1 here
            for a in sorted(stale):  # moved on behind this App's cache by another one
                await theirs.execute(a, Deposit(amount=5))
            start = {a: (10, 2) if a in stale else (5, 1) for a in ("a", "b", "c")}
            versions, events = _model(start, items)
            got = await log.execute_many(items)
            assert [None if isinstance(r, rv.Rejected) else r.version for r in got] == versions
            landed = await _stored(first)
            assert [o for _, _, o, _, _ in landed] == list(range(1, len(landed) + 1))
            for aggregate in {i[0] for i in items} | {"a", "b", "c"}:
                mine = [(v, t, amount) for a, v, _, t, amount in landed if a == aggregate]
                before = start[aggregate][1] if aggregate in start else 0
                assert [v for v, _, _ in mine] == list(range(1, len(mine) + 1))
                assert [(t, amount) for _, t, amount in mine[before:]] == events.get(aggregate, [])
            log.forget()  # the cached states equal the stored ones
            for aggregate in {i[0] for i in items}:
                assert (await log.load(aggregate)).version == len(
                    [1 for a, *_ in landed if a == aggregate]
                )

    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as d:
        mp.setattr(eventlog, "_MANY_WINDOW", window)
        asyncio.run(run(Path(d)))


async def test_a_batch_cancelled_mid_way_leaves_its_aggregates_free_and_consistent(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eventlog, "_MANY_WINDOW", 20)
    app = rv.App(store=file_url)
    log = app.event_log(Account)
    async with app:
        items: list[Item] = [(f"k-{i % 300}", Deposit(amount=1)) for i in range(3000)]
        task = asyncio.ensure_future(log.execute_many(items))
        async with asyncio.timeout(60):
            while not await _stored(app):  # cancelled once some of it has landed
                await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(30):  # no turn is left held: each aggregate takes more
            for k in range(300):
                await log.execute(f"k-{k}", Deposit(amount=1))
        landed = await _stored(app)
        assert [o for _, _, o, _, _ in landed] == list(range(1, len(landed) + 1))
        cached = {k: (await log.load(f"k-{k}")).version for k in range(300)}
        log.forget()
        for k in range(300):
            mine = [v for a, v, *_ in landed if a == f"k-{k}"]
            assert mine == list(range(1, len(mine) + 1))
            assert cached[k] == (await log.load(f"k-{k}")).version == len(mine)
