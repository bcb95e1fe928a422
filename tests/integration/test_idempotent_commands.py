"""A command sent with a ``command_id`` lands once, and every retry is told the truth.

A retry (same process, another process, a restarted client, a mapper's redelivery) gets
the original outcome with ``duplicate=True`` and the handler does not run again. Every
test proves "landed once" by reading the store's rows, not by trusting return values.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from reventless.eventlog import command_id_for


class Opened(rv.Event):
    pass


class Deposited(rv.Event):
    amount: int


class Withdrew(rv.Event):
    amount: int


class Open(rv.Command):
    pass


class Deposit(rv.Command):
    amount: int


class Withdraw(rv.Command):
    amount: int


#: How often each handler ran (a retry that is answered from the log runs none).
DECIDED: collections.Counter[str] = collections.Counter()


class Account(rv.Aggregate):
    events = Opened | Deposited | Withdrew
    opened: bool = False
    balance: int = 0

    @rv.handles(Open)
    def open(self, cmd: Open) -> Opened | None:
        DECIDED["open"] += 1
        return None if self.opened else Opened()  # opening twice decides nothing

    @rv.handles(Deposit)
    def deposit(self, cmd: Deposit) -> Deposited:
        DECIDED["deposit"] += 1
        if cmd.amount <= 0:
            raise rv.Rejected("bad_amount", f"cannot deposit {cmd.amount}")
        return Deposited(amount=cmd.amount)

    @rv.handles(Withdraw)
    def withdraw(self, cmd: Withdraw) -> Withdrew:
        DECIDED["withdraw"] += 1
        if cmd.amount > self.balance:
            raise rv.Rejected("overdrawn", f"{cmd.amount} > {self.balance}")
        return Withdrew(amount=cmd.amount)

    @rv.applies(Opened)
    def _opened(self, e: Opened) -> None:
        self.opened = True

    @rv.applies(Deposited)
    def _deposited(self, e: Deposited) -> None:
        self.balance += e.amount

    @rv.applies(Withdrew)
    def _withdrew(self, e: Withdrew) -> None:
        self.balance -= e.amount


def account_app(url: str, *, cache: bool = True) -> tuple[rv.App, rv.EventLog[Account]]:
    options = rv.AppOptions(log=rv.LogOptions(cache_size=10_000 if cache else 0))
    app = rv.App(store=url, options=options)
    return app, app.event_log(Account)


async def stored(app: rv.App) -> list[tuple[Any, ...]]:
    """Every stored Account row: (offset, aggregate id, version, type, causation id)."""
    table = app.store.table_of("Account")  # type: ignore[attr-defined]
    return [
        tuple(r)
        for r in await app.store.db.read(  # type: ignore[attr-defined]
            lambda c: c.exec_driver_sql(
                f"SELECT _offset, _aggregate_id, _version, _type, _causation_id FROM {table} "
                "ORDER BY _offset"
            ).all()
        )
    ]


async def commands(app: rv.App) -> dict[str, tuple[Any, ...]]:
    """``rv_commands``: command id -> (aggregate id, first, last, version)."""
    rows = await app.store.db.read(  # type: ignore[attr-defined]
        lambda c: c.exec_driver_sql(
            "SELECT command_id, aggregate_id, first_offset, last_offset, version FROM rv_commands"
        ).all()
    )
    return {r[0]: tuple(r[1:]) for r in rows}


def same(retry: rv.ExecuteResult, original: rv.ExecuteResult) -> bool:
    return retry.duplicate and dataclasses.replace(retry, duplicate=False) == original


def fresh_pg_url(pg_database: str) -> str:
    """A store URL on a new, empty schema of the run's database."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    plain = pg_database.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{pg_database}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Makes fresh store URLs: SQLite files, or PostgreSQL schemas."""
    if request.param == "sqlite":
        yield lambda: f"sqlite:///{tmp_path / uuid.uuid4().hex}.db"
    else:
        database = request.getfixturevalue("pg_database")
        yield lambda: fresh_pg_url(database)


@pytest.fixture
def url(backend: Any) -> str:
    return str(backend())


# -- the three faults of a retry that ran the handler again ----------------------------------


async def test_retried_withdrawal_that_would_now_overdraw_returns_the_original(url: str) -> None:
    app, log = account_app(url)
    async with app:
        await log.execute("a-1", Deposit(amount=10), command_id="d-1")
        first = await log.execute("a-1", Withdraw(amount=10), command_id="w-1")
        DECIDED.clear()
        again = await log.execute("a-1", Withdraw(amount=10), command_id="w-1")  # no Rejected
        assert DECIDED == {}  # the handler did not run
        assert not first.duplicate and same(again, first)
        assert again.events == (Withdrew(amount=10),) and again.version == 2
        rows = await stored(app)
        assert [(r[2], r[3]) for r in rows] == [(1, "Deposited"), (2, "Withdrew")]


async def test_retry_whose_handler_now_decides_nothing_is_a_duplicate(url: str) -> None:
    app, log = account_app(url)
    async with app:
        first = await log.execute("a-1", Open(), command_id="o-1")
        DECIDED.clear()
        again = await log.execute("a-1", Open(), command_id="o-1")
        assert DECIDED == {}
        assert first.events == (Opened(),) and same(again, first)
        plain = await log.execute("a-1", Open(), command_id="o-2")  # never landed: decided again
        assert not plain.duplicate and plain.events == ()
        assert [r[3] for r in await stored(app)] == ["Opened"]
        assert set(await commands(app)) == {"o-1"}  # deciding nothing leaves no record


async def test_duplicate_reports_the_version_and_offsets_it_landed_at(url: str) -> None:
    app, log = account_app(url)
    async with app:
        first = await log.execute("a-1", Deposit(amount=1), command_id="d-1")
        for i in range(3):
            await log.execute("a-1", Deposit(amount=2 + i))
        again = await log.execute("a-1", Deposit(amount=1), command_id="d-1")
        assert (again.version, again.first_offset, again.last_offset) == (1, 1, 1)
        assert same(again, first)
        assert (await commands(app))["d-1"] == ("a-1", 1, 1, 1)
        assert len(await stored(app)) == 4


async def test_a_command_id_reused_on_another_aggregate_is_a_typed_error(url: str) -> None:
    app, log = account_app(url)
    async with app:
        await log.execute("a-1", Deposit(amount=5), command_id="d-1")
        with pytest.raises(rv.CommandIdReusedError, match="a-1"):
            await log.execute("a-2", Deposit(amount=5), command_id="d-1")
        with pytest.raises(rv.CommandIdReusedError):
            await log.append("a-2", [Deposited(amount=5)], expected_version=0, command_id="d-1")
        assert [r[1] for r in await stored(app)] == ["a-1"]
        # two aggregates racing for one new id: one lands, the other is told
        out = await asyncio.gather(
            log.execute("b-1", Deposit(amount=1), command_id="x"),
            log.execute("b-2", Deposit(amount=1), command_id="x"),
            return_exceptions=True,
        )
        assert sum(isinstance(o, rv.CommandIdReusedError) for o in out) == 1
        assert len([r for r in await stored(app) if r[4] == "x"]) == 1


async def test_append_with_a_landed_command_id_returns_where_it_landed(url: str) -> None:
    app, log = account_app(url)
    async with app:
        first = await log.append(
            "a-1", [Opened(), Deposited(amount=3)], expected_version=0, command_id="ap-1"
        )
        await log.execute("a-1", Deposit(amount=1))
        again = await log.append(  # stale expected version: still the original answer
            "a-1", [Opened(), Deposited(amount=3)], expected_version=0, command_id="ap-1"
        )
        assert again.duplicate and (again.first_offset, again.last_offset) == (1, 2)
        assert [r[0] for r in again.rows] == [r[0] for r in first.rows] == [1, 2]
        assert len(await stored(app)) == 3
        with pytest.raises(rv.ConcurrencyError):  # without an id a stale append still clashes
            await log.append("a-1", [Opened()], expected_version=0)


async def test_execute_many_resent_after_a_restart_answers_from_the_log(url: str) -> None:
    batch: list[Any] = [
        ("a-1", Deposit(amount=5), "m-1"),
        ("a-1", Withdraw(amount=5), "m-2"),
        ("a-2", Withdraw(amount=1), "m-3"),  # rejected: no record
        ("a-2", Open()),  # no id: runs each time
    ]
    app, log = account_app(url)
    async with app:
        first = await log.execute_many(batch)
    again_app, again_log = account_app(url)
    async with again_app:
        again = await again_log.execute_many(batch)
        for i in (0, 1):
            a, f = again[i], first[i]
            assert isinstance(a, rv.ExecuteResult) and isinstance(f, rv.ExecuteResult)
            assert same(a, f)
        assert isinstance(again[2], rv.Rejected) and isinstance(first[2], rv.Rejected)
        rows = await stored(again_app)
        assert sorted((r[1], r[2], r[3]) for r in rows) == [
            ("a-1", 1, "Deposited"),
            ("a-1", 2, "Withdrew"),
            ("a-2", 1, "Opened"),
        ]


async def test_a_racing_process_that_loses_gets_the_original_outcome(backend: Any) -> None:
    """Two Apps on one store (as two processes): no shared lock, the store decides."""
    url = backend()
    apps = [account_app(url) for _ in range(2)]
    async with apps[0][0], apps[1][0]:
        await apps[0][1].execute("a-1", Deposit(amount=10))
        for k in range(6):
            DECIDED.clear()
            out = await asyncio.gather(
                *(log.execute("a-1", Withdraw(amount=1), command_id=f"r-{k}") for _, log in apps)
            )
            winners = [o for o in out if not o.duplicate]
            assert len(winners) == 1 and all(same(o, winners[0]) for o in out if o.duplicate)
            # the loser may have decided before the winner landed, never again after
            assert DECIDED["withdraw"] <= 2
        rows = await stored(apps[0][0])
        assert sorted(r[4] for r in rows if r[4]) == [f"r-{k}" for k in range(6)]
        assert (await apps[1][1].load("a-1")).balance == 4


class HeldLookup:
    """The real store; its first command-id lookup answers, then waits for ``go``."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.held = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def find_command(self, command_id: str) -> Any:
        found = await self._store.find_command(command_id)
        if not self.held.is_set():
            self.held.set()
            await self.go.wait()
        return found


@pytest.mark.parametrize("cmd", [Withdraw(amount=5), Open()], ids=["rejects", "decides-nothing"])
async def test_a_twin_landing_between_lookup_and_load_is_the_outcome(
    backend: Any, cmd: rv.Command
) -> None:
    """Process B looks the id up (not there), process A lands the same command, then B
    loads the state A left: its handler now refuses (or decides nothing), yet B is told
    the command landed."""
    url = backend()
    (a_app, a_log), (b_app, b_log) = account_app(url), account_app(url)
    async with a_app, b_app:
        await a_log.execute("a-1", Deposit(amount=5))
        held = HeldLookup(b_app.store)
        b_log.attach(held)
        b_run = asyncio.create_task(b_log.execute("a-1", cmd, command_id="twin"))
        await held.held.wait()  # B has looked the id up and found nothing
        first = await a_log.execute("a-1", cmd, command_id="twin")
        held.go.set()
        assert same(await b_run, first)
        assert [r[4] for r in await stored(a_app)].count("twin") == 1


async def test_rows_recorded_by_an_older_store_still_answer_duplicate(url: str) -> None:
    app, log = account_app(url)
    async with app:
        await log.execute("a-1", Deposit(amount=2))
        await log.execute("a-1", Deposit(amount=3))

        def downgrade(conn: Any) -> None:  # rv_commands as the first release created it
            conn.exec_driver_sql("DROP TABLE rv_commands")
            conn.exec_driver_sql(
                "CREATE TABLE rv_commands (command_id VARCHAR(200) NOT NULL PRIMARY KEY, "
                "topic VARCHAR(200) NOT NULL, aggregate_id VARCHAR(400))"
            )
            conn.exec_driver_sql("INSERT INTO rv_commands VALUES ('old-1', 'Account', 'a-1')")

        await app.store.db.write(downgrade)  # type: ignore[attr-defined]
    again_app, again_log = account_app(url)
    async with again_app:  # opening adds the columns
        old = await again_log.execute("a-1", Withdraw(amount=100), command_id="old-1")
        assert old.duplicate and old.version == 2 and old.events == ()
        new = await again_log.execute("a-1", Deposit(amount=1), command_id="new-1")
        assert same(await again_log.execute("a-1", Deposit(amount=1), command_id="new-1"), new)
        assert await commands(again_app) == {
            "old-1": ("a-1", None, None, None),
            "new-1": ("a-1", 3, 3, 3),
        }
        assert len(await stored(again_app)) == 3


# -- a mapper's deterministic command ids -------------------------------------------------------

sweep = rv.EventMapper("sweep")


@sweep.on(Deposited)
def _sweep(ev: rv.Envelope[Deposited]) -> rv.Send | None:
    """Every deposit to a customer account is taken from the pool."""
    if ev.aggregate_id == "pool":
        return None
    return rv.Send(Account, "pool", Withdraw(amount=ev.event.amount))


async def test_a_mapper_redelivery_after_a_crash_is_told_the_original_outcome(url: str) -> None:
    app, log = account_app(url)
    handle = app.collect(sweep)
    async with app:
        await log.execute("pool", Deposit(amount=10))
        dep = await log.execute("c-1", Deposit(amount=10))
        await handle.wait_caught_up()
        assert (await log.load("pool")).balance == 0
        [env] = await log.read(dep.first_offset, 1)
        msg_id = env.msg_id
    # the mapper's checkpoint is lost (a crash before it moved): the event comes again,
    # and the pool could not pay a second time
    await _forget_checkpoints(url, "sweep")
    again_app, again_log = account_app(url)
    again = again_app.collect(sweep)
    async with again_app:
        await again.wait_caught_up()
        assert await again.dead_letters() == []  # not parked as "overdrawn"
        cid = command_id_for("sweep", msg_id, "0")
        assert (await commands(again_app))[cid][0] == "pool"
        rows = [r for r in await stored(again_app) if r[1] == "pool"]
        assert [r[3] for r in rows] == ["Deposited", "Withdrew"]
        retry = await again_log.execute("pool", Withdraw(amount=10), command_id=cid)
        assert retry.duplicate and retry.events == (Withdrew(amount=10),)


async def _forget_checkpoints(url: str, component: str) -> None:
    app, _ = account_app(url)
    async with app:
        await app.store.db.write(  # type: ignore[attr-defined]
            lambda c: c.exec_driver_sql(
                f"DELETE FROM rv_checkpoints WHERE component = '{component}'"
            )
        )


# -- the property -------------------------------------------------------------------------------

AGGS = 3
step = st.one_of(
    st.tuples(
        st.just("new"),
        st.integers(0, AGGS - 1),
        st.sampled_from(["dep", "wd", "open"]),
        st.integers(0, 6),
    ),
    st.tuples(st.just("retry"), st.integers(0, 10_000), st.just(""), st.just(0)),
    st.tuples(st.just("race_new"), st.integers(0, AGGS - 1), st.just("wd"), st.integers(0, 6)),
    st.tuples(st.just("race_retry"), st.integers(0, 10_000), st.just(""), st.integers(2, 3)),
)


def _command(kind: str, amount: int) -> rv.Command:
    if kind == "dep":
        return Deposit(amount=amount)  # amount 0 is rejected
    if kind == "wd":
        return Withdraw(amount=amount)
    return Open()


async def _property(url: str, steps: list[tuple[str, int, str, int]]) -> None:
    # Two Apps on one store: the second plays another process (no shared in-process lock).
    # No aggregate cache: a process deciding on a state another one has moved on from
    # may reject, which is not what this property is about.
    (app, log), (other_app, other) = account_app(url, cache=False), account_app(url, cache=False)
    sent: list[tuple[str, str, rv.Command]] = []  # (command id, aggregate id, command)
    outcome: dict[str, rv.ExecuteResult | rv.Rejected] = {}
    balance = [0] * AGGS
    opened = [False] * AGGS

    def expect(agg: int, cmd: rv.Command) -> str:
        """What the model says the first execution does: landed / rejected / nothing."""
        if isinstance(cmd, Deposit):
            if cmd.amount <= 0:
                return "rejected"
            balance[agg] += cmd.amount
            return "landed"
        if isinstance(cmd, Withdraw):
            if cmd.amount > balance[agg]:
                return "rejected"
            balance[agg] -= cmd.amount
            return "landed"
        if opened[agg]:
            return "nothing"
        opened[agg] = True
        return "landed"

    async def run(target: rv.EventLog[Account], cid: str, aid: str, cmd: rv.Command) -> Any:
        try:
            return await target.execute(aid, cmd, command_id=cid)
        except rv.Rejected as r:
            return r

    def check_retry(cid: str, got: Any) -> None:
        first = outcome[cid]
        if isinstance(first, rv.ExecuteResult) and first.events:
            assert isinstance(got, rv.ExecuteResult) and same(got, first), (got, first)

    def has_landed(cid: str) -> bool:
        first = outcome[cid]
        return isinstance(first, rv.ExecuteResult) and bool(first.events)

    def resent(cid: str, aid: str, cmd: rv.Command, got: Any) -> None:
        """A resend: the original outcome if it landed, else decided again (the model too)."""
        if has_landed(cid):
            check_retry(cid, got)
            return
        want = expect(int(aid[2:]), cmd)
        if want == "landed":
            assert isinstance(got, rv.ExecuteResult) and not got.duplicate and got.events
            outcome[cid] = got
        elif want == "rejected":
            assert isinstance(got, rv.Rejected)
        else:
            assert isinstance(got, rv.ExecuteResult) and not got.events

    async with app, other_app:
        for kind, n, what, amount in steps:
            if kind in ("new", "race_new"):
                cid, aid, cmd = f"c-{len(sent)}", f"a-{n}", _command(what, amount)
                want = expect(n, cmd)
                if kind == "new":
                    got = await run(log, cid, aid, cmd)
                    outs = [got]
                else:  # sent three times at once, by both "processes"
                    outs = list(
                        await asyncio.gather(*(run(t, cid, aid, cmd) for t in (log, other, log)))
                    )
                    got = next((o for o in outs if not getattr(o, "duplicate", True)), outs[0])
                if want == "rejected":
                    assert all(isinstance(o, rv.Rejected) for o in outs)
                elif want == "nothing":
                    assert all(isinstance(o, rv.ExecuteResult) and not o.events for o in outs)
                else:
                    assert isinstance(got, rv.ExecuteResult) and not got.duplicate and got.events
                    assert [o for o in outs if o is not got] == [
                        o for o in outs if o is not got and same(o, got)
                    ]
                sent.append((cid, aid, cmd))
                outcome[cid] = got
            elif sent and kind == "retry":
                cid, aid, cmd = sent[n % len(sent)]
                resent(cid, aid, cmd, await run(log if n % 2 else other, cid, aid, cmd))
            elif sent and kind == "race_retry":
                cid, aid, cmd = sent[n % len(sent)]
                if not has_landed(cid):
                    continue
                outs = await asyncio.gather(
                    *(run(log if i % 2 else other, cid, aid, cmd) for i in range(amount))
                )
                for o in outs:
                    check_retry(cid, o)

        await _holds_each_landed_command_once(app, outcome)

    # a restarted client resends every command it sent, in a fresh App: those that landed
    # get their original outcome, the others are decided again (and may land now)
    restarted, relog = account_app(url, cache=False)
    async with restarted:
        for cid, aid, cmd in sent:
            resent(cid, aid, cmd, await run(relog, cid, aid, cmd))
        for cid, aid, cmd in sent:  # and once more: everything is answered from the log
            if has_landed(cid):
                check_retry(cid, await run(relog, cid, aid, cmd))
        await _holds_each_landed_command_once(restarted, outcome)
        for i in range(AGGS):
            assert (await relog.load(f"a-{i}")).balance == balance[i]


async def _holds_each_landed_command_once(app: rv.App, outcome: dict[str, Any]) -> None:
    """The store holds each landed command's events exactly once, and nothing else."""
    landed = {c: o for c, o in outcome.items() if isinstance(o, rv.ExecuteResult) and o.events}
    rows = await stored(app)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert sorted(r[4] for r in rows) == sorted(landed)
    for cid, res in landed.items():
        mine = [r for r in rows if r[4] == cid]
        assert [(r[0], r[1], r[2]) for r in mine] == [
            (res.first_offset, res.aggregate_id, res.version)
        ]
    assert await commands(app) == {
        c: (o.aggregate_id, o.first_offset, o.last_offset, o.version) for c, o in landed.items()
    }


steps_strategy = st.lists(step, min_size=1, max_size=25)


@settings(max_examples=40)
@given(steps=steps_strategy)
def test_every_retry_gets_the_original_outcome_sqlite(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, str, int]]
) -> None:
    path = tmp_path_factory.mktemp("idem") / "store.db"
    asyncio.run(_property(f"sqlite:///{path}", steps))


@pytest.mark.postgres
@settings(max_examples=25)
@given(steps=steps_strategy)
def test_every_retry_gets_the_original_outcome_postgres(
    pg_database: str, steps: list[tuple[str, int, str, int]]
) -> None:
    asyncio.run(_property(fresh_pg_url(pg_database), steps))


@pytest.mark.parametrize(
    "kind", ["sqlite-memory", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_lookups_in_flight_together_each_get_their_own_record(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Concurrent lookups share reads (batched); each still gets its own answer."""
    url = (
        "sqlite://"
        if kind == "sqlite-memory"
        else fresh_pg_url(request.getfixturevalue("pg_database"))
    )
    app, log = account_app(url)
    async with app:
        batch = [(f"a-{i % 7}", Deposit(amount=1 + i), f"b-{i}") for i in range(120)]
        first = await log.execute_many(batch)
        again = await log.execute_many([*batch, ("a-0", Deposit(amount=1), "fresh")])
        assert all(
            isinstance(a, rv.ExecuteResult) and isinstance(f, rv.ExecuteResult) and same(a, f)
            for a, f in zip(again, first, strict=False)
        )
        fresh = again[-1]
        assert isinstance(fresh, rv.ExecuteResult) and not fresh.duplicate
        found = await asyncio.gather(
            *(app.store.find_command(c) for c in [f"b-{i}" for i in range(120)] + ["none"])
        )
        assert found[-1] is None
        assert [(r.aggregate_id, r.first_offset) for r in found[:-1] if r] == [
            (f.aggregate_id, f.first_offset) for f in first if isinstance(f, rv.ExecuteResult)
        ]
        assert len(await stored(app)) == 121
