"""A SQLite file's group commit spread over many pages of a grown log: its savepoint
keeps the pages' undo copies in memory (the writer's ``temp_store=MEMORY``), and a clash
among hundreds of requests still undoes that request alone. Read back from the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.store import require_sql
from reventless.store.append import AppendResult
from reventless.testing.store_suite import Account, Deposited


async def test_a_clash_in_a_group_over_many_pages_undoes_only_its_request(tmp_path: Path) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}")
    log = app.event_log(Account)
    async with app:
        store = require_sql(app.store, "the test")
        # 3,000 aggregates: one group's rows on every tenth land on hundreds of index pages
        first = await log.append_many((f"a-{i:05d}", [Deposited(amount=1)], 0) for i in range(3000))
        assert all(isinstance(r, AppendResult) for r in first)
        items = [(f"a-{i:05d}", [Deposited(amount=2)], 1) for i in range(0, 3000, 10)]
        items[150] = (items[150][0], [Deposited(amount=3)], 0)  # stale: version 1 is taken
        got = await log.append_many(items)
        assert [i for i, r in enumerate(got) if isinstance(r, rv.ConcurrencyError)] == [150]
        table = store.table_of("Account")
        landed = await store.db.read(
            lambda conn: conn.exec_driver_sql(
                f"SELECT _aggregate_id, _version, amount FROM {table} WHERE _version = 2"
            ).all()
        )
        expected = {(a, 2, 2) for k, (a, _, _) in enumerate(items) if k != 150}
        assert {tuple(r) for r in landed} == expected
        assert (
            await store.db.read(
                lambda conn: conn.exec_driver_sql(
                    f"SELECT COUNT(*) FROM {table} WHERE _aggregate_id = '{items[150][0]}'"
                ).scalar()
            )
            == 1
        )
        offsets = await store.db.read(
            lambda conn: [o for (o,) in conn.exec_driver_sql(f"SELECT _offset FROM {table}")]
        )
        assert sorted(offsets) == list(range(1, 3000 + len(items)))  # gapless
        temp_store = await store.db.write(
            lambda conn: conn.exec_driver_sql("PRAGMA temp_store").scalar()
        )
        assert temp_store == 2  # MEMORY


async def test_a_write_that_sorts_a_table_keeps_its_temporary_data_in_files(
    tmp_path: Path,
) -> None:
    """Registering topics (``sorts=True``: an index over a table's rows) sorts in files, as
    SQLite does by default; every other write keeps the writer's in-memory setting, which
    is back after it."""
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}")
    app.event_log(Account)
    async with app:
        db = require_sql(app.store, "the test").db

        def temp_store(conn: Any) -> int:
            return int(conn.exec_driver_sql("PRAGMA temp_store").scalar())

        assert await db.write(temp_store, sorts=True) == 1  # FILE
        assert await db.write(temp_store) == 2  # MEMORY

        def fails(conn: Any) -> None:
            raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            await db.write(fails, sorts=True)
        assert await db.write(temp_store) == 2
