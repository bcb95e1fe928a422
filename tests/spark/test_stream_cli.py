"""``reventless stream`` as a user runs it: the shop's revenue projection to the head of
the log (``--trigger available``), a JSON line per micro-batch, and bad input as one line
with exit status 2."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

import reventless as rv
from examples.shop.model import PlaceOrder
from examples.shop.revenue_stream import app
from tests.cli.process import ROOT, reventless, user_error

pytestmark = pytest.mark.spark

APP = "examples.shop.revenue_stream:app"
MODEL = "examples.shop.revenue_stream:sku_hours"


async def test_stream_runs_the_projection_to_the_head_and_reports_each_batch(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'shop.db'}"
    shop = app(store)
    async with shop:
        log = shop.topics["Order"]
        assert isinstance(log, rv.EventLog)
        for i in range(8):
            cmd = PlaceOrder(
                customer_id="c-1", sku=f"sku-{i % 2}", qty=1, unit_price=Decimal("1.25")
            )
            await log.execute(f"o-{i}", cmd)
    run = reventless(
        "stream", MODEL, "--app", APP, "--store", store, "--trigger", "available",
        "--checkpoint", str(tmp_path / "ck"), "--json", cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    batches = [json.loads(line) for line in run.stdout.splitlines()]
    assert batches and batches[0]["name"] == "sku_hourly_revenue"
    assert sum(b["rows_in"] for b in batches) == 8
    assert batches[-1]["lag"] == {"Order": 0}
    assert "last batch" in run.stderr and "Order[0]=8" in run.stderr
    # what landed: two SKUs in one hour, read from the store
    shop = app(store)
    async with shop:
        got = await shop.store.db.read(
            lambda c: c.exec_driver_sql(
                "SELECT sku, units, revenue FROM rm_sku_hourly_revenue ORDER BY sku"
            ).fetchall()
        )
    assert [(s, u, Decimal(str(r))) for s, u, r in got] == [
        ("sku-0", 4, Decimal("5.00")),
        ("sku-1", 4, Decimal("5.00")),
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'shop.db'}"
    unknown = reventless("stream", "nothing_here", "--app", APP, "--store", store, cwd=ROOT)
    user_error(unknown, "unknown component 'nothing_here'")
    trigger = reventless(
        "stream", MODEL, "--app", APP, "--store", store, "--trigger", "soon", cwd=ROOT
    )
    user_error(trigger, "trigger")
    not_a_model = reventless(
        "stream", "examples.shop.revenue_stream:fold", "--app", APP, "--store", store, cwd=ROOT
    )
    user_error(not_a_model, "not a read model")
