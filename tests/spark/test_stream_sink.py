"""The streaming sink's transaction (no Spark): rows, checkpoints and batch id together;
a replayed batch id changes nothing; a moved checkpoint fences the batch out."""

from __future__ import annotations

import pytest

import reventless as rv
from examples.shop.model import StockLevel, stock_levels
from reventless.errors import StreamFencedError
from reventless.spark.fold import row_values
from reventless.store import require_sql
from reventless.store.collector import Progress
from reventless.store.streamsink import SqlStreamSink, StreamBatch
from tests.spark.shoplog import declare


def _row(sku: str, available: int) -> tuple[object, ...]:
    return row_values(stock_levels, StockLevel(sku=sku, available=available, reserved=0))


async def _sink(url: str) -> tuple[rv.App, SqlStreamSink]:
    app = rv.App(store=url)
    declare(app)
    return app, SqlStreamSink(require_sql(app.store, "t").db, stock_levels)


async def test_a_replayed_batch_id_is_a_no_op(shared_url: str) -> None:
    app, sink = await _sink(shared_url)
    async with app:
        sink.open_sync()
        first = StreamBatch("stock_levels", "run-1", 0, {("Inventory", 0): 5}, [_row("a", 1)])
        assert sink.commit_sync(first)
        assert not sink.commit_sync(  # Spark replays batch 0 after a crash: nothing changes
            StreamBatch("stock_levels", "run-1", 0, {("Inventory", 0): 5}, [_row("a", 99)])
        )
        second = StreamBatch(
            "stock_levels", "run-1", 1, {("Inventory", 0): 9}, [_row("b", 2)], ["a"]
        )
        assert sink.commit_sync(second)
        assert await sink.table.all() == [StockLevel(sku="b", available=2, reserved=0)]
        got, _ = await app.store.collectors.load("stock_levels")  # type: ignore[attr-defined]
        assert got == {("Inventory", 0): 9}
        state = sink.state_sync("stock_levels")
        assert state is not None and (state.batch_id, state.rows) == (1, 3)


async def test_checkpoints_moved_by_another_collector_fence_the_batch_out(
    shared_url: str,
) -> None:
    app, sink = await _sink(shared_url)
    async with app:
        sink.open_sync()
        assert sink.commit_sync(StreamBatch("stock_levels", "r", 0, {("Inventory", 0): 5}))
        store = app.store.collectors  # type: ignore[attr-defined]
        await store.commit("stock_levels", Progress("Inventory", 0, 7))  # a live collector
        with pytest.raises(StreamFencedError, match="partition 0 is at 7"):
            sink.commit_sync(
                StreamBatch("stock_levels", "r", 1, {("Inventory", 0): 9}, [_row("x", 1)])
            )
        assert await sink.table.all() == []  # nothing of the batch landed
        got, _ = await store.load("stock_levels")
        assert got == {("Inventory", 0): 7}
        state = sink.state_sync("stock_levels")
        assert state is not None and state.batch_id == 0
        # a new run (a new Spark checkpoint) starts from where it was handed the model
        fresh = StreamBatch("stock_levels", "r2", 0, {("Inventory", 0): 8}, start=got)
        assert sink.commit_sync(fresh)
