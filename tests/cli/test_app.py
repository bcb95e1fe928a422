"""``--app`` and the read model name modules of the current directory, and a factory gets
``--store``: the shop's own factory, from the repository root, as the README writes it."""

from __future__ import annotations

import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from examples.shop.model import AddStock, OrderSummary, PlaceOrder, build
from tests.cli.process import ROOT, reventless
from tests.services import unavailable

APP = "examples.shop.model:app"


async def shop_orders(url: str) -> list[OrderSummary]:
    """Place two orders (one confirmed, one cancelled) and return the settled summaries."""
    shop = build(url)
    async with shop.app:
        await shop.inventory.execute("sku-1", AddStock(qty=3))
        for n, qty in ((1, 2), (2, 5)):
            cmd = PlaceOrder(customer_id="c-1", sku="sku-1", qty=qty, unit_price=Decimal("9.99"))
            await shop.orders.execute(f"o-{n}", cmd)
        await shop.app.settle()
        return await shop.summaries.all()


def test_infra_synth_imports_the_app_from_the_current_directory(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    result = reventless(
        "infra", "synth", "--app", APP, "--out", str(out), "--aws-url", "none",
        "--nats-url", "none", cwd=ROOT,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    assert "CREATE TABLE" in (out / "schema.sqlite.sql").read_text()
    assert "rm_order_summaries" in (out / "schema.postgresql.sql").read_text()


async def test_redrive_runs_the_shop_factory_on_the_given_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    await shop_orders(url)
    result = reventless("redrive", "order_confirmations", "--app", APP, "--store", url, cwd=ROOT)
    assert (result.returncode, result.stderr) == (0, "")
    assert "redriven: 0  still parked: 0" in result.stdout
    # the factory opened the given store, not the demo's default
    topics = reventless("topics", "--store", url, cwd=tmp_path)
    assert "order_confirmations" in topics.stdout


@pytest.mark.spark
async def test_rebuild_from_the_repository_root(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        unavailable("Java is not installed (make test installs it: infra/local/java.sh)")
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    live = await shop_orders(url)
    result = reventless(
        "rebuild", "examples.shop.model:order_summaries", "--app", APP, "--store", url,
        "--master", "local[1]", "--workdir", str(tmp_path / "spark"), cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "rebuilt order_summaries" in result.stdout and "rows written 2" in result.stdout
    shop = build(url)
    async with shop.app:  # the swapped-in table holds what the live collector had built
        assert sorted(await shop.summaries.all(), key=lambda s: s.order_id) == sorted(
            live, key=lambda s: s.order_id
        )
