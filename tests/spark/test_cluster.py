"""A rebuild on a real Spark standalone cluster (one master, two workers on loopback),
driven through the CLI: handlers run in the workers' executors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from examples.shop.model import OrderPlaced, StockAdded, StockReserved, stock_levels
from tests.spark.cliapp import app as shop_app
from tests.spark.conftest import ROOT, executors
from tests.spark.shoplog import append

pytestmark = pytest.mark.spark


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "reventless.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


async def test_rebuild_on_a_standalone_cluster_through_the_cli(
    standalone: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    app = shop_app(url)
    steps: list[tuple[int, int, Any]] = [(2, i % 3, StockAdded(qty=i + 1)) for i in range(200)]
    steps += [(2, i % 3, StockReserved(order_id=f"o-{i}", qty=1)) for i in range(50)]
    steps += [
        (1, i % 5, OrderPlaced(customer_id=f"c-{i % 4}", sku="s", qty=2, unit_price=1))
        for i in range(5)
    ]
    async with app:
        await append(list(app.topics.values()), steps, {})  # type: ignore[arg-type]
        await app.settle()
        live = await _rows(app)
    cluster, before = standalone, executors(standalone)
    done = cli(
        "rebuild",
        "examples.shop.model:stock_levels",
        *("--app", "tests.spark.cliapp:app", "--store", url),
        *("--master", cluster.master, "--workdir", str(tmp_path / "w")),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(executors(cluster) - before) >= 2  # both workers ran an executor
    assert f"on {cluster.master}" in done.stderr
    assert "rebuilt stock_levels (python): events read 250, events applied 250" in done.stdout
    assert "rows written 3" in done.stdout
    again = shop_app(url)
    async with again:
        assert await _rows(again) == live


async def _rows(app: Any) -> list[Any]:
    from reventless.store.readmodel import SqlReadModelTable as ReadModelTable

    return await ReadModelTable(stock_levels, app.store.db).all()


def test_the_clusters_daemons_run_with_its_java_options(standalone: Any) -> None:
    from reventless.spark.standalone import DAEMON_JAVA_OPTIONS

    assert standalone.java_options == DAEMON_JAVA_OPTIONS
    for proc in standalone._procs:  # the master and the two workers
        args = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert args[0] == b"java"
        assert [a.decode() for a in args[2:4]] == list(DAEMON_JAVA_OPTIONS), args[:6]


def test_cli_rebuild_rejects_a_bad_read_model_path() -> None:
    done = cli("rebuild", "examples.shop.model", "--app", "tests.spark.cliapp:app")
    assert done.returncode == 2 and "module:attribute" in done.stderr
