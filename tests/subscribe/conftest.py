"""Subscription tests run on SQLite (file) and PostgreSQL: ``db_url`` is both."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import reventless as rv


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL: a SQLite file, then a PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'subs.db'}"
    return str(request.getfixturevalue("pg_url"))


ORDERS = pa.schema(
    [
        pa.field("k", pa.string()),
        pa.field("qty", pa.int64()),
        pa.field("total", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("name", pa.string()),
    ]
)


def orders_app(
    url: str, *, partitions: int = 1, tenant: str | None = None
) -> tuple[rv.App, rv.Topic]:
    """An App with one schema topic ``orders`` keyed by ``k``."""
    app = rv.App(store=url)
    topic = app.topic("orders", schema=ORDERS, key="k", partitions=partitions, tenant=tenant)
    return app, topic


def order_rows(n: int, *, start: int = 0, keys: int = 5) -> pa.Table:
    """``n`` orders: keys ``o-<i % keys>``, qty ``i``, total ``i * 1.5``, name ``n<i>``."""
    idx = range(start, start + n)
    return pa.table(
        {
            "k": [f"o-{i % keys}" for i in idx],
            "qty": list(idx),
            "total": [i * 1.5 for i in idx],
            "flag": [i % 2 == 0 for i in idx],
            "name": [f"n{i}" for i in idx],
        },
        schema=ORDERS,
    )
