"""Personal fields (rv.Personal) in Spark: rebuilds open them in the executors like the live
collector does, a forgotten subject's read as rv.ERASED without failing the job, and
read_log shows them sealed, or opened on request.

The Spark session is shared and may be older than the master key set here, so these
pass only if the key travels with the job (the executors' environment lacks it)."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

import reventless as rv
from reventless.errors import KeyringError
from reventless.spark import read_log, rebuild
from reventless.spark.keysource import KeySource
from reventless.store.keys import MasterKey, is_sealed
from tests.spark.personalmodel import (
    MODELS,
    Customer,
    Renamed,
    cards,
    latest,
    names,
    register_all,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(autouse=True)
def master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVENTLESS_MASTER_KEY", MasterKey.generate().text)


async def test_rebuild_equals_live_then_erases_only_the_forgotten(
    spark: Any, tmp_path: Path
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    log = app.event_log(Customer)
    views = {m.name: app.collect(m) for m in MODELS}
    async with app:
        await register_all(log)
        await app.settle()
        live = {name: await v.all() for name, v in views.items()}
        assert {c.name for c in live["pd_cards"]} == {"ADA LOVELACE", "Alan Turing", "GRACE HOPPER"}
        for model in MODELS:
            report = await rebuild(model, app, spark=spark, workdir=tmp_path / "w")
            assert await views[model.name].all() == live[model.name], model.name
            assert report.path == "python"  # column upserts of a personal field, too
        with pytest.raises(rv.SpecError, match="not personal"):  # no SQL can open them
            await rebuild(latest, app, spark=spark, fast=True)
        segments = ds.dataset(str(tmp_path / "w" / "segments"), format="parquet")
        stored = segments.to_table(columns=["name"]).column("name").to_pylist()
        assert len(stored) == 5 and all(is_sealed(v) for v in stored)  # Spark read them sealed

        await app.forget("c-1")
        for model in (cards, latest):
            await rebuild(model, app, spark=spark, workdir=tmp_path / "w")
        card = {r.id: r for r in await views["pd_cards"].all()}
        assert (card["c-1"].name, card["c-1"].born) == (rv.ERASED, rv.ERASED)
        assert (card["c-1"].city, card["c-1"].renames) == ("London", 1)
        assert [card[c] for c in ("c-2", "c-3")] == live["pd_cards"][1:]
        last = {r.id: (r.name, r.changes) for r in await views["pd_latest"].all()}
        assert last == {
            "c-1": ("[erased]", 2),
            "c-2": ("Alan Turing", 1),
            "c-3": ("GRACE HOPPER", 2),
        }


@pytest.mark.postgres
async def test_rebuild_over_jdbc_reads_keys_from_postgres(
    spark: Any, pg_url: str, tmp_path: Path
) -> None:
    """JDBC frames carry the sealed text; executors read rv_keys with psycopg, in the
    store's schema (search_path); the forgotten subject's key is gone there too."""
    app = rv.App(store=pg_url)
    log = app.event_log(Customer)
    view = app.collect(names)  # keyed by a key function: opened before grouping, too
    async with app:
        await register_all(log)
        await app.settle()
        live = await view.all()
        await rebuild(names, app, spark=spark, workdir=tmp_path / "w")
        assert await view.all() == live
        await app.forget("c-1")
        await rebuild(names, app, spark=spark, workdir=tmp_path / "w")
        named = {r.customer: r.name for r in await view.all()}
    assert named == {"c-1": "[erased]", "c-2": "Alan Turing", "c-3": "GRACE HOPPER"}


async def test_events_caught_up_at_the_swap_are_opened(spark: Any, tmp_path: Path) -> None:
    """Events the live collector handled during the rebuild are applied to the new table
    by the swap's catch-up, on the driver: opened there too."""
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    log = app.event_log(Customer)
    view = app.collect(cards)
    async with app:
        await register_all(log)
        await app.settle()
        task = asyncio.create_task(rebuild(cards, app, spark=spark, workdir=tmp_path / "w"))
        during = 0
        while not task.done():
            during += 1
            renamed = Renamed(customer_id="c-2", name=f"Alan Turing {during}")
            await log.append("c-2", [renamed], expected_version=during)
            await asyncio.sleep(0.01)
        report = await task
        await app.settle()
        card = {r.id: r for r in await view.all()}
    assert report.events_applied > report.events_read  # the catch-up applied some
    assert card["c-2"].name == f"Alan Turing {during}"
    assert card["c-2"].renames == during
    assert card["c-1"].name == "ADA LOVELACE"


async def test_read_log_is_sealed_unless_opened(spark: Any, tmp_path: Path) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    log = app.event_log(Customer)
    async with app:
        await register_all(log)
        sealed = await read_log(log, spark=spark, workdir=tmp_path / "w")
        assert all(is_sealed(r["name"]) for r in sealed.collect())
        await app.forget("c-3")
        df = await read_log(log, spark=spark, workdir=tmp_path / "w", opened=True)
        rows = sorted((r["_offset"], r["name"], r["born"], r["city"]) for r in df.collect())
    assert rows == [
        (1, "Ada Lovelace", "1815-12-10", "London"),
        (2, "Alan Turing", "1912-06-23", "London"),
        (3, "[erased]", "[erased]", "New York"),
        (4, "ADA LOVELACE", None, None),
        (5, "[erased]", None, None),
    ]


async def test_the_key_source_pickles_and_hides_its_secrets(tmp_path: Path) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    app.event_log(Customer)
    async with app:
        keys = KeySource.of(app.store)
    assert pickle.loads(pickle.dumps(keys)) == keys
    master = MasterKey.parse(keys.master)
    assert keys.master not in repr(keys) and master.text == keys.master
    assert KeySource.of(app.store).job != keys.job  # each job caches keys of its own


async def test_an_in_memory_store_cannot_hand_keys_to_executors(spark: Any) -> None:
    app = rv.App(store="sqlite://")
    app.event_log(Customer)
    app.collect(cards)
    async with app:
        with pytest.raises(KeyringError, match="in-memory SQLite"):
            await rebuild(cards, app, spark=spark)
