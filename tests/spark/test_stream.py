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
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    logs = declare(app)
    live_view = app.collect(stock_levels)
    streamed = copy_of(stock_levels, "stock_levels_streamed")
    segs = tmp_path / "segs"
    versions: dict[str, int] = {}
    async with app:
        await append(logs, _steps(40), versions)
        await export(app, segs)
        running = start_stream(
            streamed,
            app,
            spark=spark,
            checkpoint=tmp_path / "ck",
            trigger="500ms",
            reader=segments_reader(app, segs),
        )
        try:
            running.wait_for(lambda q: any(p.rows_out for p in q.progress), timeout=120)
            await append(logs, _steps(30, base=40), versions)  # a second batch, state kept
            await export(app, segs)
            await app.settle()
            live = await live_view.all()
            running.wait_for(lambda q: _sync_rows(app, streamed) == live, timeout=120)
        finally:
            running.stop()
        rebuilt = await rebuild(
            copy_of(stock_levels, "stock_levels_rebuilt"), app, spark=spark, workdir=tmp_path / "w"
        )
        assert rebuilt.rows == len(live)
        assert await rows(app, copy_of(stock_levels, "stock_levels_rebuilt")) == live
        assert await rows(app, streamed) == live
        state = running.state()
        assert state is not None and state.batch_id >= 1


def _sync_rows(app: rv.App, model: rv.ReadModel[Any]) -> list[Any]:
    from reventless.store import require_sql
    from reventless.store.readmodel import SqlReadModelTable

    table = SqlReadModelTable(model, require_sql(app.store, "rows").db)
    got = table.db.read_sync(lambda conn: table.fetch_sync(conn, ["sku-1", "sku-2", "sku-3"]))
    return [got[k] for k in sorted(got)]
