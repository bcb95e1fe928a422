"""``Topic.publish`` takes exactly the topic's columns; what it returns; the default service.

Every rejection is proved by reading the store back: the head did not move, no row landed.
"""

from __future__ import annotations

import datetime as dt
import sys
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.app import default_service
from reventless.codec import META_NAMES, TopicSchema
from reventless.errors import MetadataError, SchemaMismatchError, TenantError
from reventless.store import require_sql

ORDERS = pa.schema(
    [
        pa.field("k", pa.string(), nullable=False),
        pa.field("qty", pa.int64(), nullable=False),
        pa.field("ratio", pa.float32()),
        pa.field("note", pa.string()),
        pa.field("tags", pa.list_(pa.field("item", pa.int64(), nullable=False))),
        pa.field("info", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)
AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)


def good(n: int = 2) -> dict[str, pa.Array]:
    return {
        "k": pa.array([f"o-{i}" for i in range(n)]),
        "qty": pa.array(list(range(n)), pa.int64()),
        "ratio": pa.array([0.5] * n, pa.float32()),
        "note": pa.array(["x"] * n),
        "tags": pa.array([[1, 2]] * n, ORDERS.field("tags").type),
        "info": pa.array([{"a": 1, "b": "y"}] * n, ORDERS.field("info").type),
        "at": pa.array([AT] * n, pa.timestamp("us", tz="UTC")),
    }


def table(**change: pa.Array | None) -> pa.Table:
    cols = {**good(), **change}
    return pa.table({k: v for k, v in cols.items() if v is not None})


class Price(BaseModel):
    sku: str
    cents: int


class Cost(BaseModel):  # the same fields, another model
    sku: str
    cents: int


class Discounted(Price):
    off: int = 0


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[rv.App]:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}", service="t")
    app.topic("orders", schema=ORDERS, key="note")
    app.topic("prices", model=Price, key="sku")
    app.topic("pinned", schema=ORDERS, tenant="acme")
    async with app:
        yield app


async def landed(app: rv.App, topic: str) -> tuple[int, list[Any]]:
    """The store's head of ``topic`` and every row in it."""
    return await app.store.head(topic), await app.store.read(topic, 1, 10_000)


BAD_TABLES: dict[str, Callable[[], Any]] = {
    "missing-nullable": lambda: table(note=None),
    "missing-not-null": lambda: table(qty=None),
    "extra": lambda: table(nope=pa.array([1, 2])),
    "text-to-int": lambda: table(qty=pa.array(["1", "2"])),
    "float-to-int": lambda: table(qty=pa.array([1.0, 2.0])),
    "float64-to-float32": lambda: table(ratio=pa.array([0.1, 0.2])),
    "null-in-not-null": lambda: table(k=pa.array(["a", None])),
    "text-in-a-list-of-ints": lambda: table(tags=pa.array([["1"], ["2"]])),
    "null-list-item": lambda: table(tags=pa.array([[1, None], []])),
    "struct-extra-field": lambda: table(info=pa.array([{"a": 1, "b": "y", "c": 2}] * 2)),
    "struct-missing-field": lambda: table(info=pa.array([{"a": 1}] * 2)),
    "text-for-timestamp": lambda: table(at=pa.array(["2024-05-06", "2024-05-06"])),
    "ns-loses-precision": lambda: table(
        at=pa.array([1_700_000_000_000_000_001] * 2, pa.timestamp("ns", tz="UTC"))
    ),
    "binary-for-text": lambda: table(note=pa.array([b"x", b"y"])),
    "empty-but-missing-a-column": lambda: table(note=None).slice(0, 0),
}


@pytest.mark.parametrize("make", BAD_TABLES.values(), ids=BAD_TABLES.keys())
async def test_a_batch_that_differs_from_the_topic_lands_nothing(
    app: rv.App, make: Callable[[], Any]
) -> None:
    topic = app.topics["orders"]
    await topic.publish(table())
    before = await landed(app, "orders")
    with pytest.raises(SchemaMismatchError):
        await topic.publish(make())
    assert await landed(app, "orders") == before
    assert before[0] == 2 and len(before[1]) == 2


async def test_a_batch_as_record_batch_is_checked_the_same(app: rv.App) -> None:
    with pytest.raises(SchemaMismatchError, match="missing"):
        await app.topics["orders"].publish(table(note=None).to_batches()[0])
    assert await landed(app, "orders") == (0, [])


async def test_safe_casts_and_another_column_order_are_accepted(app: rv.App) -> None:
    topic = app.topics["orders"]
    wide = {
        "at": pa.array([AT, None], pa.timestamp("ns", tz="UTC")),  # exact: no precision lost
        "info": pa.array([{"b": "y", "a": 1}, None]),  # struct fields by name
        "tags": pa.array([[1, 2], None], pa.list_(pa.int32())),
        "note": pa.array(["x", "x"]).dictionary_encode(),
        "ratio": pa.array([1, None], pa.int8()),  # an int into a float
        "qty": pa.array([7, 8], pa.int32()),
        "k": pa.array(["a", "b"], pa.large_string()),
    }
    res = await topic.publish(pa.table(wide))
    assert (res.first_offset, res.last_offset) == (1, 2)
    [one, two] = await topic.read()
    assert one.event == {
        "k": "a",
        "qty": 7,
        "ratio": 1.0,
        "note": "x",
        "tags": [1, 2],
        "info": {"a": 1, "b": "y"},
        "at": AT,
    }
    assert (two.event["tags"], two.event["info"], two.event["at"]) == (None, None, None)
    # int64 into int32 is value-checked: accepted when every value fits
    narrow = rv.App(store="sqlite://")
    small = narrow.topic("small", schema=pa.schema([pa.field("n", pa.int32())]))
    async with narrow:
        await small.publish(pa.table({"n": [1, -5]}))
        with pytest.raises(SchemaMismatchError, match="'n'"):
            await small.publish(pa.table({"n": [1, 2**40]}))
        assert [e.event["n"] for e in await small.read()] == [1, -5]
        assert await narrow.store.head("small") == 2


async def test_model_topics_take_only_their_model(app: rv.App) -> None:
    prices = app.topics["prices"]
    await prices.publish([Price(sku="a", cents=1)])
    before = await landed(app, "prices")
    bad: list[Any] = [
        [Price(sku="b", cents=2), Cost(sku="c", cents=3)],
        [Discounted(sku="d", cents=4, off=1)],  # a subclass: its extra field would be lost
        [{"sku": "e", "cents": 5}],
        "not a list",
        42,
    ]
    for data in bad:
        with pytest.raises(SchemaMismatchError):
            await prices.publish(data)
    assert await landed(app, "prices") == before


async def test_dict_rows_must_have_exactly_the_columns(app: rv.App) -> None:
    topic = app.topics["orders"]
    row = table().to_pylist()[0]
    res = await topic.publish([row, {**row, "note": None, "tags": None}])
    assert (res.first_offset, res.last_offset) == (1, 2)
    assert [e.event["k"] for e in await topic.read()] == ["o-0", "o-0"]
    before = await landed(app, "orders")
    bad = [
        [{k: v for k, v in row.items() if k != "note"}],  # a missing nullable key
        [{**row, "nope": 1}],
        [{**row, "qty": "7"}],  # no text parsed into numbers
        [{**row, "note": 5}],
        [{**row, "tags": [1, None]}],
        [row, Price(sku="a", cents=1)],
    ]
    for data in bad:
        with pytest.raises(SchemaMismatchError):
            await topic.publish(data)
    assert await landed(app, "orders") == before


async def test_publishing_nothing_returns_the_empty_range_at_the_head(app: rv.App) -> None:
    orders, prices = app.topics["orders"], app.topics["prices"]
    res = await orders.publish(table().slice(0, 0))
    assert (res.first_offset, res.last_offset) == (1, 0)
    await orders.publish(table())
    for empty in (table().slice(0, 0), pa.RecordBatch.from_pylist([], schema=ORDERS), []):
        res = await orders.publish(empty)
        assert (res.topic, res.first_offset, res.last_offset, res.rows) == ("orders", 3, 2, [])
        assert res.last_offset - res.first_offset + 1 == 0
    res = await prices.publish([])
    assert (res.first_offset, res.last_offset) == (1, 0)
    assert (await landed(app, "orders"))[0] == 2
    assert await landed(app, "prices") == (0, [])


async def test_a_pinned_topic_stamps_its_tenant_and_rejects_others(app: rv.App) -> None:
    pinned = app.topics["pinned"]
    await pinned.publish(table())
    with pytest.raises(TenantError):
        await pinned.publish(table(), meta=rv.Metadata(tenant="globex"))
    await pinned.publish(table(), meta=rv.Metadata(tenant="acme"))
    envs = await pinned.read()
    assert [e.meta.tenant for e in envs] == ["acme"] * 4
    assert await app.store.head("pinned") == 4


async def test_a_null_key_is_no_aggregate_id(app: rv.App) -> None:
    topic = app.topics["orders"]  # keyed by the nullable "note"
    await topic.publish(table(note=pa.array(["x", None])))
    assert [e.aggregate_id for e in await topic.read()] == ["x", None]


def test_from_arrow_rows_fills_missing_columns_only_when_asked() -> None:
    schema = TopicSchema.from_arrow("t", pa.schema([("a", pa.int64()), ("b", pa.string())]))
    older = pa.table({"a": [1]})  # a batch written before "b" was added
    with pytest.raises(SchemaMismatchError, match="missing"):
        schema.from_arrow_rows(older, with_meta=False)
    assert schema.from_arrow_rows(older, with_meta=False, fill_missing=True) == [(1, None)]
    meta = (1, 0, 0, None, None, "t", 1, "m", None, None, None, None, None, None, 0, None)
    full = schema.to_arrow([(*meta, 1, "x")]).drop_columns(["b"])
    [row] = schema.from_arrow_rows(full, with_meta=True, fill_missing=True)
    assert row[len(META_NAMES) :] == (1, None)


# -- the default service ------------------------------------------------------------------


def test_service_comes_from_the_environment_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVENTLESS_SERVICE", "billing")
    assert rv.App(store="sqlite://").service == "billing"
    assert rv.App(store="sqlite://", service="shop").service == "shop"


def test_service_falls_back_to_the_program_then_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    monkeypatch.delenv("REVENTLESS_SERVICE", raising=False)
    main = types.ModuleType("__main__")
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/srv/app/worker.py", "--flag"])
    assert default_service() == "worker"
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert default_service() == socket.gethostname()
    spec = types.SimpleNamespace(name="shop.api.__main__")
    main.__spec__ = spec  # type: ignore[assignment]
    assert default_service() == "shop.api"
    monkeypatch.setenv("REVENTLESS_SERVICE", "bad\nname")  # not valid metadata: passed over
    assert default_service() == "shop.api"


def test_an_invalid_service_fails_when_the_app_is_built() -> None:
    with pytest.raises(MetadataError):
        rv.App(store="sqlite://", service="a\nb")


async def test_events_carry_the_default_service(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REVENTLESS_SERVICE", "ingest")
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    topic = app.topic("orders", schema=ORDERS)
    async with app:
        await topic.publish(table())
        await topic.publish(table(), meta=rv.Metadata(service="manual"))
        assert [e.meta.service for e in await topic.read()] == ["ingest"] * 2 + ["manual"] * 2


async def test_a_failed_export_leaves_no_file_and_keeps_an_earlier_one(
    app: rv.App, tmp_path: Path
) -> None:
    topic = app.topics["orders"]
    await topic.publish(table())
    old = tmp_path / "old.parquet"
    assert await topic.export_parquet(old) == 2
    await topic.publish(table())
    store = require_sql(app.store, "this test")
    name = store.table_of("orders")
    # a value the topic's Arrow type cannot hold (SQLite keeps it): the third row fails
    await store.db.write(
        lambda c: c.exec_driver_sql(f"UPDATE {name} SET qty = 'x' WHERE _offset = 3")
    )
    new = tmp_path / "new.parquet"
    with pytest.raises(SchemaMismatchError):
        await topic.export_parquet(new, batch_size=2)  # one page written, then the failure
    with pytest.raises(SchemaMismatchError):
        await topic.export_parquet(old)
    assert sorted(p.name for p in tmp_path.iterdir() if "parquet" in p.name) == ["old.parquet"]
    assert pq.read_table(old).column("qty").to_pylist() == [0, 1]
