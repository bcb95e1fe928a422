"""Streaming projections: handler parity (live = rebuild = stream), exactly-once batches,
windowed pipelines with late rows counted, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from examples.shop.model import StockAdded, StockReleased, StockReserved, stock_levels
from reventless.spark import rebuild
from reventless.spark.streamrun import start_stream
from tests.spark.shoplog import append, declare
from tests.spark.streamlog import copy_of, export, rows, segments_reader

pytestmark = pytest.mark.spark


def _steps(n: int, base: int = 0) -> list[tuple[int, int, Any]]:
    out: list[tuple[int, int, Any]] = []
    for i in range(base, base + n):
        out.append((2, i % 3, StockAdded(qty=i % 7 + 1)))
        if i % 4 == 0:
            out.append((2, i % 3, StockReserved(order_id=f"o-{i}", qty=1)))
        if i % 9 == 0:
            out.append((2, i % 3, StockReleased(order_id=f"o-{i}", qty=1)))
    return out


async def test_handlers_in_a_stream_equal_the_live_collector_and_the_rebuild(
    spark: Any, tmp_path: Path
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}", options=rv.AppOptions(partitions=2))
    logs = declare(app)
    live_view = app.collect(stock_levels)
    streamed = copy_of(stock_levels, "stock_levels_streamed")
    versions: dict[str, int] = {}
    async with app:
        await append(logs, _steps(40), versions)
        running = start_stream(
            streamed, app, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms"
        )
        try:
            running.wait_for(lambda q: any(p.rows_out for p in q.progress), timeout=120)
            await append(logs, _steps(30, base=40), versions)  # later batches: state kept
            await app.settle()
            heads = await app.store.partition_heads(["Inventory"])  # type: ignore[attr-defined]
            running.wait_for_positions(heads, timeout=120)
        finally:
            running.stop()
        live = await live_view.all()
        rebuilt = copy_of(stock_levels, "stock_levels_rebuilt")
        report = await rebuild(rebuilt, app, spark=spark, workdir=tmp_path / "w")
        assert report.rows == len(live) == 3
        assert await rows(app, rebuilt) == live
        assert await rows(app, streamed) == live
        state = running.state()
        assert state is not None and state.batch_id >= 1
        # every partition read through the head (an empty one: through the topic's head)
        assert all(state.positions[p] >= h for p, h in heads.items())
        assert max(state.positions.values()) == max(heads.values())
        checkpoints = await app.store.collectors.load(streamed.name)  # type: ignore[attr-defined]
        assert checkpoints[0] == state.positions
        assert running.sink.lag_sync(state.positions) == {"Inventory": 0}
        assert sum(p.rows_in for p in running.progress) == heads[("Inventory", 0)]


def _sync_rows(app: rv.App, model: rv.ReadModel[Any]) -> list[Any]:
    from reventless.store import require_sql
    from reventless.store.readmodel import SqlReadModelTable

    table = SqlReadModelTable(model, require_sql(app.store, "rows").db)
    got = table.db.read_sync(lambda conn: table.fetch_sync(conn, ["sku-1", "sku-2", "sku-3"]))
    return [got[k] for k in sorted(got)]
