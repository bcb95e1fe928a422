"""The store conformance suite: subclass it in a test module and provide ``store_url``.

Example::

    class TestSqliteFile(StoreConformance):
        @pytest.fixture
        def store_url(self, tmp_path):
            return f"sqlite:///{tmp_path / 'x.db'}"

Every check proves its claim by reading the store back, never by trusting return values.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from pydantic import BaseModel

import reventless as rv
from reventless.codec import VERSION_AT
from reventless.errors import ConcurrencyError, SchemaMismatchError, TenantError
from reventless.store import SqlEventStore, require_sql


class Deposited(rv.Event):
    amount: int
    note: str | None = None


class Withdrawn(rv.Event):
    amount: int


class Deposit(rv.Command):
    amount: int


class Withdraw(rv.Command):
    amount: int


class Account(rv.Aggregate):
    """A bank account: the suite's aggregate."""

    events = Deposited | Withdrawn
    balance: int = 0

    @rv.handles(Deposit)
    def deposit(self, cmd: Deposit) -> Deposited:
        return Deposited(amount=cmd.amount)

    @rv.handles(Withdraw)
    def withdraw(self, cmd: Withdraw) -> Withdrawn:
        if cmd.amount > self.balance:
            raise rv.Rejected("insufficient_funds", f"balance {self.balance} < {cmd.amount}")
        return Withdrawn(amount=cmd.amount)

    @rv.applies(Deposited)
    def _dep(self, e: Deposited) -> None:
        self.balance += e.amount

    @rv.applies(Withdrawn)
    def _wd(self, e: Withdrawn) -> None:
        self.balance -= e.amount


class Claimed(rv.Event):
    """A DCB log's event: its ``who`` field is a tag (``user:<who>``)."""

    who: Annotated[str, rv.Tag("user")]


class Price(BaseModel):
    """A schema topic declared from a pydantic model."""

    sku: str
    cents: int
    note: str | None = None


CDC_SCHEMA = pa.schema(
    [
        pa.field("op", pa.string(), nullable=False),
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("after", pa.string()),
    ]
)


def cdc_table(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "op": ["c"] * n,
            "ts_ms": list(range(start, start + n)),
            "key": [f"order-{i % 7}" for i in range(start, start + n)],
            "after": ['{"total": 1}'] * n,
        },
        schema=CDC_SCHEMA,
    )


def sql_store(app: rv.App) -> SqlEventStore:
    """The app's store as the SQL store this suite inspects."""
    return require_sql(app.store, "the SQL store conformance suite")


async def sql_rows(app: rv.App, sql: str) -> list[Any]:
    """Run raw SQL against the app's store (the proof of what landed)."""
    return await sql_store(app).db.read(lambda c: list(c.exec_driver_sql(sql).all()))


async def assert_gapless(app: rv.App, topic: str) -> list[int]:
    table = sql_store(app).table_of(topic)
    offsets = [r[0] for r in await sql_rows(app, f"SELECT _offset FROM {table} ORDER BY _offset")]
    assert offsets == list(range(1, len(offsets) + 1)), offsets
    assert await app.store.head(topic) == len(offsets)
    return offsets


class StoreConformance:
    """Behaviour every EventStore must show. Subclasses provide a ``store_url`` fixture."""

    @pytest.fixture
    async def app(self, store_url: str) -> AsyncIterator[rv.App]:
        app = rv.App(store=store_url, service="suite")
        app.event_log(Account)
        app.topic("cdc.orders", schema=CDC_SCHEMA, key="key")
        app.topic("cdc.pinned", schema=CDC_SCHEMA, tenant="acme")
        async with app:
            yield app

    def accounts(self, app: rv.App) -> rv.EventLog[Account]:
        return app.event_log(Account)

    async def test_execute_load_and_metadata(self, app: rv.App) -> None:
        log = self.accounts(app)
        meta = rv.Metadata(user="ada", ip="10.1.2.3", correlation_id="corr-1")
        res = await log.execute("a-1", Deposit(amount=5), meta=meta)
        assert (res.version, res.first_offset, res.last_offset) == (1, 1, 1)
        await log.execute("a-1", Deposit(amount=7))
        acct = await log.load("a-1")
        assert (acct.balance, acct.version, acct.id) == (12, 2, "a-1")
        [env, env2] = await log.read()
        assert env.event == Deposited(amount=5) and env.offset == 1 and env.version == 1
        assert env.meta.user == "ada" and env.meta.ip == "10.1.2.3"
        assert env.meta.correlation_id == "corr-1" and env.meta.service == "suite"
        assert env.msg_id != env2.msg_id and rv.uuid7().version == 7
        import uuid

        assert uuid.UUID(env.msg_id).version == 7
        assert env2.meta.correlation_id == env2.msg_id  # filled in when not given
        table = sql_store(app).table_of("Account")
        rows = await sql_rows(app, f"SELECT _type, _schema_version, _row_idx FROM {table}")
        assert rows == [("Deposited", 1, 0), ("Deposited", 1, 0)]

    async def test_rejection_is_typed_and_lands_nothing(self, app: rv.App) -> None:
        log = self.accounts(app)
        with pytest.raises(rv.Rejected) as info:
            await log.execute("a-1", Withdraw(amount=1))
        assert info.value.code == "insufficient_funds"
        assert await sql_rows(app, f"SELECT * FROM {sql_store(app).table_of('Account')}") == []
        with pytest.raises(rv.AggregateNotFoundError):
            await log.get("a-1")

    async def test_concurrency_error_lands_nothing(self, app: rv.App) -> None:
        log = self.accounts(app)
        await log.execute("a-1", Deposit(amount=1))
        with pytest.raises(ConcurrencyError):
            await log.append("a-1", [Deposited(amount=99)], expected_version=0)
        rows = await sql_rows(app, f"SELECT _version FROM {sql_store(app).table_of('Account')}")
        assert rows == [(1,)]
        await assert_gapless(app, "Account")
        res = await log.append("a-1", [Deposited(amount=2)], expected_version=1)
        assert res.first_offset == 2  # the failed append left no hole

    async def test_concurrent_commands_in_one_process_all_land(self, app: rv.App) -> None:
        log = self.accounts(app)
        await asyncio.gather(*(log.execute("hot", Deposit(amount=1)) for _ in range(60)))
        await asyncio.gather(*(log.execute(f"a-{i}", Deposit(amount=1)) for i in range(60)))
        log.forget()
        assert (await log.load("hot")).balance == 60
        table = sql_store(app).table_of("Account")
        versions = await sql_rows(
            app, f"SELECT _version FROM {table} WHERE _aggregate_id = 'hot' ORDER BY _version"
        )
        assert [v for (v,) in versions] == list(range(1, 61))
        await assert_gapless(app, "Account")

    async def test_bulk_appends_round_trip(self, app: rv.App) -> None:
        log = self.accounts(app)
        big = [Deposited(amount=i, note=None if i % 3 else f"n{i}") for i in range(1500)]
        res = await log.append("bulk-0", big, expected_version=0)
        assert (res.first_offset, res.last_offset) == (1, 1500)
        # many concurrent appends share one transaction (group commit)
        await asyncio.gather(
            *(log.append(f"bulk-{i}", big[:100], expected_version=0) for i in range(1, 21))
        )
        await assert_gapless(app, "Account")
        table = sql_store(app).table_of("Account")
        rows = await sql_rows(
            app,
            f"SELECT amount, note, _version FROM {table} WHERE _aggregate_id = 'bulk-0' "
            "ORDER BY _offset",
        )
        assert rows == [(e.amount, e.note, v) for v, e in enumerate(big, start=1)]
        log.forget()
        assert (await log.load("bulk-7")).balance == sum(range(100))
        with pytest.raises(ConcurrencyError):  # a clash inside a bulk append lands nothing
            await log.append("bulk-3", big[:200], expected_version=50)
        assert await log.head() == 1500 + 20 * 100

    async def test_partitions_are_stable_and_fixed(self, store_url: str) -> None:
        app = rv.App(store=store_url, options=rv.AppOptions(partitions=4))
        log = app.event_log(Account)
        async with app:
            ids = [f"acct-{i}" for i in range(20)]
            await asyncio.gather(*(log.execute(a, Deposit(amount=1)) for a in ids))
            for a in ids[:5]:
                await log.execute(a, Deposit(amount=2))
            table = sql_store(app).table_of("Account")
            rows = await sql_rows(app, f"SELECT _aggregate_id, _partition, _offset FROM {table}")
            assert {(a, p) for a, p, _ in rows} == {(a, zlib.crc32(a.encode()) % 4) for a in ids}
            heads = await app.store.partition_heads(["Account"])
            for p in range(4):
                mine = sorted(o for _, q, o in rows if q == p)
                assert heads[("Account", p)] == (mine[-1] if mine else 0)
                got = await app.store.read("Account", 1, 100, partition=p)
                assert [r[0] for r in got] == mine  # in offset order, only that partition
        again = rv.App(store=store_url, options=rv.AppOptions(partitions=8))
        again.event_log(Account)
        if not sql_store(app).db.is_memory:  # the count is fixed once the topic exists
            with pytest.raises(SchemaMismatchError, match="partitions"):
                await again.start()

    async def test_command_id_makes_execution_idempotent(self, app: rv.App) -> None:
        log = self.accounts(app)
        first = await log.execute("a-1", Deposit(amount=3), command_id="cmd-1")
        again = await log.execute("a-1", Deposit(amount=3), command_id="cmd-1")
        assert not first.duplicate and again.duplicate
        assert len(await sql_rows(app, f"SELECT * FROM {sql_store(app).table_of('Account')}")) == 1

    async def test_snapshots_keep_state_equal_to_the_fold(self, store_url: str) -> None:
        app = rv.App(store=store_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=10)))
        log = app.event_log(Account)
        async with app:
            for i in range(35):
                await log.execute("a-1", Deposit(amount=i))
            snaps = await sql_rows(
                app, "SELECT version FROM rv_snapshots WHERE aggregate_id = 'a-1'"
            )
            assert snaps == [(30,)]
            loaded = await log.load("a-1")
            assert (loaded.balance, loaded.version) == (sum(range(35)), 35)
            # a snapshot of another state shape is ignored, the fold still works
            await sql_store(app).db.write(
                lambda c: c.exec_driver_sql("UPDATE rv_snapshots SET fingerprint = 'old'")
            )
            assert (await log.load("a-1")).balance == sum(range(35))

    async def test_append_honours_the_snapshot_policy_and_snapshots_on_demand(
        self, store_url: str
    ) -> None:
        app = rv.App(store=store_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=10)))
        log = app.event_log(Account)
        query = "SELECT version FROM rv_snapshots WHERE aggregate_id = 'a-1'"
        async with app:
            await log.execute("a-1", Deposit(amount=1))  # cached at version 1
            await log.append("a-1", [Deposited(amount=2) for _ in range(8)], expected_version=1)
            assert await sql_rows(app, query) == []  # 9 events: no multiple of 10 crossed
            await log.append("a-1", [Deposited(amount=3) for _ in range(6)], expected_version=9)
            assert await sql_rows(app, query) == [(15,)]  # crossed 10: the state at 15
            state = await log.load("a-1")
            assert (state.version, state.balance) == (15, 1 + 16 + 18)
            # the cached state did not go stale behind the appends
            res = await log.execute("a-1", Deposit(amount=4))
            assert res.version == 16
            assert await log.take_snapshot("a-1") == 16
            assert await sql_rows(app, query) == [(16,)]
            assert await log.take_snapshot("nobody") == 0
            assert await sql_rows(
                app, "SELECT count(*) FROM rv_snapshots WHERE aggregate_id = 'nobody'"
            ) == [(0,)]
            log.forget()
            assert (await log.load("a-1")).balance == 1 + 16 + 18 + 4

    async def test_load_many_equals_load_of_each(self, store_url: str) -> None:
        app = rv.App(store=store_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=4)))
        log = app.event_log(Account)
        async with app:
            for i in range(1, 8):
                await log.append(
                    f"m-{i}", [Deposited(amount=i + k) for k in range(i)], expected_version=0
                )
            # more ids than one query takes on SQLite (500), known ones on both sides
            nobody = [f"nobody-{k}" for k in range(700)]
            ids = [f"m-{i}" for i in range(1, 5)] + nobody + [f"m-{i}" for i in range(4, 8)]
            many = await app.store.load_many("Account", ids)
            assert set(many) == set(ids)
            for a in dict.fromkeys(ids):
                assert many[a] == await app.store.load("Account", a), a
            assert all(many[a] == (None, []) for a in nobody)
            assert many["m-5"][0] is not None and many["m-5"][0][0] == 5  # the snapshot

    async def test_load_reads_the_snapshot_and_the_rows_after_it(self, store_url: str) -> None:
        """``store.load`` gives the stored snapshot and exactly the stored rows after it,
        by version, as the tables hold them: with no snapshot, a snapshot mid-way, a
        snapshot at the head, and an unknown aggregate. (PostgreSQL reads them in one
        statement, the snapshot's row sharing the rows' columns.)"""
        app = rv.App(store=store_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=0)))
        log = app.event_log(Account)
        notes = ["", 'it\'s "quoted"', None, "\u00fcn\u00ef", "x" * 300]
        events = [Deposited(amount=k, note=notes[k % len(notes)]) for k in range(1, 8)]
        async with app:
            table = sql_store(app).table_of("Account")
            for a in ("none", "mid", "head"):
                await log.append(a, events[:3], expected_version=0)
            await log.append("other", [Withdrawn(amount=1)], expected_version=0)
            assert await log.take_snapshot("mid") == 3
            for a in ("none", "mid", "head"):
                await log.append(a, events[3:], expected_version=3)
            await log.append("mid", [Withdrawn(amount=2)], expected_version=7)
            assert await log.take_snapshot("head") == 7
            for a, after in (("none", 0), ("mid", 3), ("head", 7)):
                stored = await sql_rows(
                    app,
                    f"SELECT * FROM {table} WHERE _aggregate_id = '{a}' AND _version > {after} "
                    "ORDER BY _version",
                )
                snaps = await sql_rows(
                    app,
                    "SELECT version, fingerprint, state FROM rv_snapshots "
                    f"WHERE aggregate_id = '{a}'",
                )
                snap, rows = await app.store.load("Account", a)
                assert [tuple(r) for r in rows] == [tuple(r) for r in stored], a
                assert snap == (tuple(snaps[0]) if snaps else None), a
            assert [r[VERSION_AT] for r in (await app.store.load("Account", "mid"))[1]] == [
                4,
                5,
                6,
                7,
                8,
            ]
            assert (await app.store.load("Account", "head"))[1] == []
            assert await app.store.load("Account", "nobody") == (None, [])
            log.forget()
            for a, balance in (("none", 28), ("mid", 26), ("head", 28)):
                state = await log.load(a)
                assert (state.version, state.balance) == (8 if a == "mid" else 7, balance), a

    async def test_execute_many_keeps_order_and_reads_what_landed(self, store_url: str) -> None:
        app = rv.App(store=store_url, options=rv.AppOptions(log=rv.LogOptions(cache_size=0)))
        log = app.event_log(Account)
        async with app:
            await log.execute("old", Deposit(amount=10))
            items: list[tuple[str, rv.Command]] = [("old", Withdraw(amount=4))]
            items += [(f"n-{i % 50}", Deposit(amount=i)) for i in range(1200)]
            items += [("old", Withdraw(amount=6)), ("old", Withdraw(amount=7))]
            got = await log.execute_many(items, concurrency=16)
            assert isinstance(got[-1], rv.Rejected) and got[-1].code == "insufficient_funds"
            assert [type(g) for g in got[:-1]] == [rv.ExecuteResult] * (len(items) - 1)
            log.forget()
            assert (await log.load("old")).balance == 10 - 4 - 6
            # each new aggregate got its 24 deposits in input order (versions follow them)
            landed = await log.read(limit=5000)
            for i in range(50):
                mine = [e for e in landed if e.aggregate_id == f"n-{i}"]
                assert [e.event.amount for e in mine] == list(range(i, 1200, 50))
                assert [e.version for e in mine] == list(range(1, 25))

    async def test_read_pages_arrow_batches_and_parquet(self, app: rv.App, tmp_path: Path) -> None:
        log = self.accounts(app)
        for i in range(25):
            await log.execute(f"a-{i % 3}", Deposit(amount=i))
        page = await log.read(from_offset=11, limit=5)
        assert [e.offset for e in page] == [11, 12, 13, 14, 15]
        batches = [b async for b in log.read_batches(from_offset=1, batch_size=10)]
        assert [b.num_rows for b in batches] == [10, 10, 5]
        assert all(b.schema.equals(log.arrow_schema) for b in batches)
        assert pa.Table.from_batches(batches).column("amount").to_pylist() == list(range(25))
        n = await log.export_parquet(tmp_path / "acc.parquet")
        back = pq.read_table(tmp_path / "acc.parquet")
        assert n == 25 and back.schema.equals(log.arrow_schema)
        assert back.column("_offset").to_pylist() == list(range(1, 26))
        assert [e.offset async for e in log.iter(20)] == [20, 21, 22, 23, 24, 25]
        async for first in log.read_batches(batch_size=2):  # stopping early frees the reader
            assert first.num_rows == 2
            break
        assert [e.offset async for e in log.iter(24, page_size=1)] == [24, 25]

    async def test_read_batches_of_some_columns(self, app: rv.App) -> None:
        log = self.accounts(app)
        for i in range(25):
            await log.execute(f"a-{i % 3}", Deposit(amount=i))
        full = pa.Table.from_batches([b async for b in log.read_batches(batch_size=10)])
        names = ["amount", "_offset", "_aggregate_id", "_produced_at"]
        some = [b async for b in log.read_batches(from_offset=1, batch_size=10, columns=names)]
        assert [b.num_rows for b in some] == [10, 10, 5]
        wanted = pa.schema([log.arrow_schema.field(n) for n in names])
        assert all(b.schema.equals(wanted) for b in some)
        assert pa.Table.from_batches(some).equals(full.select(names))
        tail = [b async for b in log.read_batches(from_offset=24, columns=["_version"])]
        assert pa.Table.from_batches(tail).column(0).to_pylist() == [8, 9]
        for bad in (["nope"], [], ["amount", "amount"]):
            with pytest.raises(rv.SchemaMismatchError):
                _ = [b async for b in log.read_batches(columns=bad)]

    async def test_schema_topic_publish_and_mismatch_lands_nothing(self, app: rv.App) -> None:
        cdc = app.topics["cdc.orders"]
        res = await cdc.publish(cdc_table(10))
        assert (res.first_offset, res.last_offset) == (1, 10)
        bad_type = cdc_table(3).set_column(1, "ts_ms", pa.array(["x", "y", "z"]))
        missing = cdc_table(3).drop_columns(["key"])
        extra = cdc_table(3).append_column("nope", pa.array([1, 2, 3]))
        nulls = pa.table(
            {"op": ["c", None], "ts_ms": [1, 2], "key": ["k", "k"], "after": [None, None]}
        )
        for bad in (bad_type, missing, extra, nulls):
            with pytest.raises(SchemaMismatchError):
                await cdc.publish(bad)
        rows = await sql_rows(app, f"SELECT COUNT(*) FROM {sql_store(app).table_of('cdc.orders')}")
        assert rows == [(10,)]
        [env] = await cdc.read(from_offset=10, limit=1)
        assert env.event == {"op": "c", "ts_ms": 9, "key": "order-2", "after": '{"total": 1}'}
        assert env.aggregate_id == "order-2"
        await assert_gapless(app, "cdc.orders")

    async def test_schema_topic_takes_exactly_its_columns(self, app: rv.App) -> None:
        cdc = app.topics["cdc.orders"]
        await cdc.publish(cdc_table(3))
        table = sql_store(app).table_of("cdc.orders")
        before = await sql_rows(app, f"SELECT * FROM {table} ORDER BY _offset")
        with pytest.raises(SchemaMismatchError, match="after"):  # a nullable column left out
            await cdc.publish(cdc_table(2).drop_columns(["after"]))
        with pytest.raises(SchemaMismatchError, match="after"):
            await cdc.publish([{"op": "c", "ts_ms": 1, "key": "k"}])
        assert await sql_rows(app, f"SELECT * FROM {table} ORDER BY _offset") == before
        assert await app.store.head("cdc.orders") == 3
        wide = pa.table(  # safe casts, another column order, an all-null nullable column
            {
                "after": [None],
                "key": pa.array(["k"]).dictionary_encode(),
                "ts_ms": pa.array([5], pa.int32()),
                "op": pa.array(["u"], pa.large_string()),
            }
        )
        res = await cdc.publish(wide)
        assert (res.first_offset, res.last_offset) == (4, 4)
        empties: list[pa.Table | list[Price]] = [cdc_table(0), []]
        for empty in empties:  # nothing appended: the empty range at the head
            res = await cdc.publish(empty)
            assert (res.first_offset, res.last_offset) == (5, 4)
        await assert_gapless(app, "cdc.orders")
        [env] = await cdc.read(from_offset=4)
        assert env.event == {"op": "u", "ts_ms": 5, "key": "k", "after": None}

    async def test_model_topic_publish_round_trips(self, store_url: str) -> None:
        app = rv.App(store=store_url)
        prices = app.topic("prices", model=Price, key="sku")
        async with app:
            await prices.publish([Price(sku="a", cents=5), Price(sku="b", cents=7, note="x")])
            with pytest.raises(SchemaMismatchError):
                await prices.publish(pa.table({"sku": ["c"], "cents": ["not an int"]}))
            envs = await prices.read()
            assert [e.event for e in envs] == [
                Price(sku="a", cents=5),
                Price(sku="b", cents=7, note="x"),
            ]
            assert [e.aggregate_id for e in envs] == ["a", "b"]
            assert [e.type for e in envs] == ["Price", "Price"]
            await assert_gapless(app, "prices")

    async def test_wrong_tenant_is_rejected_up_front(self, app: rv.App) -> None:
        pinned = app.topics["cdc.pinned"]
        with pytest.raises(TenantError):
            await pinned.publish(cdc_table(2), meta=rv.Metadata(tenant="other"))
        await pinned.publish(cdc_table(2), meta=rv.Metadata(tenant="acme"))
        await pinned.publish(cdc_table(1))  # the pinned tenant is filled in
        rows = await sql_rows(app, f"SELECT _tenant FROM {sql_store(app).table_of('cdc.pinned')}")
        assert rows == [("acme",)] * 3

    async def test_execute_many_returns_rejections_as_values(self, app: rv.App) -> None:
        log = self.accounts(app)
        out = await log.execute_many(
            [("a-1", Deposit(amount=5)), ("a-1", Withdraw(amount=9)), ("a-2", Deposit(amount=1))]
        )
        assert isinstance(out[1], rv.Rejected) and out[1].code == "insufficient_funds"
        assert [r.version for r in out if isinstance(r, rv.ExecuteResult)] == [1, 1]
        assert len(await sql_rows(app, f"SELECT * FROM {sql_store(app).table_of('Account')}")) == 2

    async def test_pinned_event_log_rejects_other_tenants(self, store_url: str) -> None:
        app = rv.App(store=store_url)
        log = app.event_log(Account, tenant="acme")
        async with app:
            with pytest.raises(TenantError):
                await log.execute("a-1", Deposit(amount=1), meta=rv.Metadata(tenant="evil"))
            with pytest.raises(TenantError):
                await log.append(
                    "a-1",
                    [Deposited(amount=1)],
                    expected_version=0,
                    meta=rv.Metadata(tenant="evil"),
                )
            await log.execute("a-1", Deposit(amount=1))
            rows = await sql_rows(app, f"SELECT _tenant FROM {sql_store(app).table_of('Account')}")
            assert rows == [("acme",)]

    async def test_unknown_event_type_on_load_fails_loudly(self, app: rv.App) -> None:
        log = self.accounts(app)
        await log.execute("a-1", Deposit(amount=1))
        table = sql_store(app).table_of("Account")
        await sql_store(app).db.write(
            lambda c: c.exec_driver_sql(f"UPDATE {table} SET _type = 'Vanished'")
        )
        log.forget()
        with pytest.raises(rv.UnknownEventTypeError, match="Vanished"):
            await log.load("a-1")

    async def test_failed_build_leaves_nothing_behind(self, store_url: str) -> None:
        broker = rv.InMemoryBroker()
        app = rv.App(store=store_url, broker=broker)
        app.event_log(Account)
        app.topic("cdc.orders", schema=CDC_SCHEMA)
        app.dcb_log("claims", events=Claimed)
        broker.set_available(False)
        with pytest.raises(rv.BrokerError):
            await app.start()
        check = rv.App(store=store_url)
        await check.store.open()
        try:
            names = await sql_store(check).db.read(lambda c: sa.inspect(c).get_table_names())
            topics = await sql_store(check).db.read(
                lambda c: c.exec_driver_sql("SELECT name FROM rv_topics").all()
            )
        finally:
            await check.store.close()
        if names:  # an in-memory store vanishes with its App; a file must be clean
            assert not [n for n in names if n.startswith(("ev_", "tg_"))] and topics == []

    async def test_reopening_checks_the_stored_schema(self, file_url: str) -> None:
        app = rv.App(store=file_url)
        app.topic("cdc.orders", schema=CDC_SCHEMA)
        async with app:
            await app.topics["cdc.orders"].publish(cdc_table(2))
        grown = CDC_SCHEMA.append(pa.field("before", pa.string()))
        app2 = rv.App(store=file_url)
        app2.topic("cdc.orders", schema=grown)
        async with app2:  # adding a nullable column is a compatible change
            assert await app2.topics["cdc.orders"].head() == 2
        changed = pa.schema([pa.field("op", pa.int64(), nullable=False)])
        app3 = rv.App(store=file_url)
        app3.topic("cdc.orders", schema=changed)
        with pytest.raises(SchemaMismatchError):
            await app3.start()

    async def test_store_that_cannot_be_opened(self, tmp_path: Path) -> None:
        app = rv.App(store=f"sqlite:///{tmp_path / 'missing' / 'dir' / 'x.db'}")
        with pytest.raises(rv.StoreError):
            await app.start()
        with pytest.raises(rv.StoreError):
            rv.App(store="nosuchdb://x")

    async def test_dcb_query_and_condition(self, store_url: str) -> None:
        app = rv.App(store=store_url)
        claims = app.dcb_log("claims", events=Claimed)
        async with app:
            await claims.append([Claimed(who="ada"), Claimed(who="bob")], tags=["x:1"])
            ada = rv.Query.of(types=[Claimed], tags=["user:ada"])
            [env] = await claims.read(ada)
            assert (env.offset, env.tags) == (1, ("user:ada", "x:1"))
            assert [e.offset for e in await claims.read(rv.Query.of(tags=["x:1"]), after=1)] == [2]
            table, tags = sql_store(app).table_of("claims"), "tg_claims"
            before = await sql_rows(app, f"SELECT * FROM {table}")
            index = await sql_rows(app, f"SELECT tag, _offset FROM {tags} ORDER BY 2, 1")
            assert index == [("user:ada", 1), ("x:1", 1), ("user:bob", 2), ("x:1", 2)]
            with pytest.raises(rv.AppendConditionError) as failed:
                await claims.append([Claimed(who="ada")], condition=rv.AppendCondition(ada))
            assert failed.value.position == 1
            assert await sql_rows(app, f"SELECT * FROM {table}") == before  # nothing landed
            assert len(await sql_rows(app, f"SELECT * FROM {tags}")) == 4
            res = await claims.append([Claimed(who="ada")], condition=rv.AppendCondition(ada, 1))
            assert res.first_offset == 3
            await assert_gapless(app, "claims")
