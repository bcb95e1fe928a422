"""The revenue stream, live on Spark, equals a plain-Python fold of the same log; its
order lines land in Parquet partitioned by date."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from examples.shop.model import OrderCancelled, OrderPlaced, PlaceOrder
from examples.shop.revenue_stream import app, fold, order_lines, revenue, sku_hours
from tests.spark.conftest import spark, spark_ready  # noqa: F401 - the session-wide Spark fixture

pytestmark = pytest.mark.spark


async def test_revenue_per_sku_per_hour_streams_as_the_fold_of_the_log(
    spark: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    from reventless.spark.streamfile import start_files
    from reventless.spark.streamrun import start_stream
    from reventless.store import require_sql
    from reventless.store.readmodel import SqlReadModelTable

    shop = app(f"sqlite:///{tmp_path / 'shop.db'}")
    orders = shop.topics["Order"]
    async with shop:
        log = orders
        assert isinstance(log, rv.EventLog)
        for i in range(12):
            cmd = PlaceOrder(
                customer_id=f"c-{i % 3}",
                sku=f"sku-{i % 4}",
                qty=i % 3 + 1,
                unit_price=Decimal("2.50"),
            )
            await log.execute(f"o-{i}", cmd)
        await log.append("o-0", [OrderCancelled(reason="x")], expected_version=1)
        running = start_stream(
            sku_hours, shop, revenue, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms"
        )
        lines = start_files(
            order_lines,
            shop,
            tmp_path / "lines",
            spark=spark,
            checkpoint=tmp_path / "ck-lines",
            trigger="200ms",
        )
        try:
            heads = await require_sql(shop.store, "t").partition_heads(["Order"])
            running.wait_for_positions(heads, timeout=120)
            for i in range(12, 20):  # a second batch
                cmd = PlaceOrder(customer_id="c-9", sku="sku-1", qty=2, unit_price=Decimal("1.10"))
                await log.execute(f"o-{i}", cmd)
            heads = await require_sql(shop.store, "t").partition_heads(["Order"])
            running.wait_for_positions(heads, timeout=120)
            lines.wait_until(lambda q: _parquet_rows(tmp_path / "lines") == 20, timeout=120)
        finally:
            running.stop()
            lines.stop()
        placed = [ev for ev in await orders.read(1, 10_000) if isinstance(ev.event, OrderPlaced)]
        expected = sorted(fold(placed).values(), key=lambda r: r.id)
        table = SqlReadModelTable(sku_hours, require_sql(shop.store, "t").db)
        assert await table.all() == expected
        assert sum(r.units for r in expected) == sum(ev.event.qty for ev in placed)
    dates = sorted(p.name for p in (tmp_path / "lines").glob("date=*"))
    assert dates and all(d.startswith("date=20") for d in dates)


def _parquet_rows(path: Path) -> int:
    """Rows in the files the stream has committed: those its sink log (``_spark_metadata``,
    written atomically after each batch) lists. A part file still being written is in
    the directory already, maybe empty, and is not counted."""
    import json
    from urllib.parse import unquote, urlparse

    import pyarrow.dataset as ds

    files: set[str] = set()
    log = path / "_spark_metadata"
    for entry in sorted(log.iterdir()) if log.is_dir() else []:
        if entry.name.startswith("."):  # a log file being written (renamed when done)
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the version
            item = json.loads(line)
            target = unquote(urlparse(item["path"]).path)
            if item.get("action", "add") == "add":
                files.add(target)
            else:
                files.discard(target)
    return ds.dataset(sorted(files), format="parquet").count_rows() if files else 0
