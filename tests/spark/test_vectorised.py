"""Column-upsert read models: the compiled Spark SQL path equals the live collector and
the Python-handler path, row for row."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from examples.shop.model import OrderPlaced
from examples.shop.stats import CustomerOrders, customer_orders, stock_counters
from reventless.spark import rebuild
from reventless.spark.rebuild import plan
from reventless.spark.vector import compile_upserts
from tests.spark.shoplog import Steps, append, declare, step

pytestmark = pytest.mark.spark
MODELS = [customer_orders, stock_counters]


@settings(max_examples=5)
@given(st.lists(step, min_size=1, max_size=60))
def test_vectorised_equals_live_and_python(spark: Any, steps: Steps) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_parity(spark, Path(tmp), steps))


async def _parity(spark: Any, tmp: Path, steps: Steps) -> None:
    app = rv.App(store=f"sqlite:///{tmp / 's.db'}")
    logs = declare(app)
    views = [app.collect(m) for m in MODELS]
    async with app:
        await append(logs, steps, {})
        await app.settle()
        for model, view in zip(MODELS, views, strict=True):
            live = await view.all()
            fast = await rebuild(model, app, spark=spark, workdir=tmp / "w")
            assert fast.path == "vectorised"
            assert await view.all() == live, model.name
            slow = await rebuild(model, app, spark=spark, workdir=tmp / "w", fast=False)
            assert slow.path == "python"
            assert await view.all() == live, model.name
            assert fast.events_applied == slow.events_applied


def test_only_column_upserts_compile() -> None:
    from examples.shop.model import order_summaries

    app = rv.App(store="sqlite://")
    declare(app)
    assert compile_upserts(customer_orders, plan(customer_orders, app)) is not None
    assert compile_upserts(order_summaries, plan(order_summaries, app)) is None


def test_column_upserts_need_defaults() -> None:
    from pydantic import BaseModel

    class NoDefault(BaseModel):
        k: str
        n: int

    with pytest.raises(rv.SpecError, match="defaults"):
        rv.ColumnUpserts(rv.ReadModel("nodefault", row=NoDefault, key="k"))
    with pytest.raises(rv.SpecError, match="no field"):
        rv.ColumnUpserts(rv.ReadModel("x", row=CustomerOrders, key="customer_id")).on(
            OrderPlaced, latest={"last_sku": "nope"}
        )
