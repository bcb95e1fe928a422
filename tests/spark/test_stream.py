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
from tests.spark.streamlog import copy_of, rows

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
            running.wait_until(lambda q: any(p.rows_out for p in q.progress), timeout=120)
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


async def test_late_events_behind_the_watermark_are_counted_not_lost_silently(
    spark: Any, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from tests.spark.streamlog import HourCount, Read, Sensor, hour_counts, per_hour

    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    sensors = app.event_log(Sensor)

    def at(h: int, m: int = 0) -> datetime:
        return datetime(2026, 1, 1, h, m, tzinfo=UTC)

    async with app:
        first = [Read(at=at(12, 5), value=1.0), Read(at=at(12, 40), value=2.0)]
        await sensors.append("s-1", first, expected_version=0)
        running = start_stream(
            hour_counts, app, per_hour, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms"
        )
        try:
            # Spark drops late rows by the watermark that the batch before the current one
            # ran with: wait until a batch ran with 12:30 (12:40 less ten minutes), so the
            # late row cannot share a batch that still filters by the start's watermark
            running.wait_until(
                lambda q: any(
                    (p.watermark or "").startswith("2026-01-01T12:30") for p in q.progress
                ),
                timeout=120,
            )
            await sensors.append(
                "s-1",
                [Read(at=at(9), value=5.0), Read(at=at(12, 50), value=3.0)],  # 09:00 is late
                expected_version=2,
            )
            heads = await app.store.partition_heads(["Sensor"])  # type: ignore[attr-defined]
            running.wait_for_positions(heads, timeout=120)
        finally:
            running.stop()
        got = await rows(app, hour_counts)
        assert got == [HourCount(id="s-1@12:00", readings=3, total=6.0)]  # 09:00 left out
        state = running.state()
        assert state is not None and state.late == 1  # ... and counted
        assert sum(p.late for p in running.progress) == 1


async def test_bad_input_is_a_typed_error(tmp_path: Path) -> None:
    from reventless.errors import StreamError
    from reventless.spark.streamcli import resolve, run_stream
    from tests.spark.streamlog import HourCount

    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    declare(app)
    app.collect(stock_levels)
    mapper = rv.EventMapper("a_mapper")
    mapper.on(StockAdded)(lambda ev: None)
    app.collect(mapper)
    with pytest.raises(StreamError, match=r"unknown component 'nope'.*stock_levels"):
        resolve(app, "nope")
    with pytest.raises(StreamError, match="only read models"):
        resolve(app, "a_mapper")
    with pytest.raises(StreamError, match="not a read model"):
        resolve(app, "examples.shop.model:fulfilment")
    with pytest.raises(StreamError, match="cannot load component"):
        resolve(app, "examples.shop.nothing:here")
    empty: rv.ReadModel[Any] = rv.ReadModel("empty", row=HourCount, key="id")
    with pytest.raises(StreamError, match="no handlers and no pipeline"):
        start_stream(empty, app)
    for bad in ("5 hours", "-1s", "0s", "soon"):
        with pytest.raises(StreamError, match="trigger"):
            run_stream(app, "stock_levels", trigger=bad)
    assert resolve(app, "stock_levels") == (stock_levels, None)
    model, pipe = resolve(app, "examples.shop.revenue_stream:sku_hours")
    assert model.name == "sku_hourly_revenue" and pipe is not None


async def test_a_pipeline_without_the_row_columns_is_a_typed_error(
    spark: Any, tmp_path: Path
) -> None:
    from reventless.errors import StreamError
    from tests.spark.streamlog import hour_counts

    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    declare(app)
    async with app:  # the store exists
        pass
    with pytest.raises(StreamError, match="lack column"):
        start_stream(
            hour_counts,
            app,
            lambda topics: topics["Inventory"].select("_offset"),
            spark=spark,
            checkpoint=tmp_path / "ck",
        )
    with pytest.raises(StreamError, match="no topic 'Nope'"):
        start_stream(
            hour_counts, app, lambda topics: topics["Nope"], spark=spark, checkpoint=tmp_path / "c"
        )
    assert not (tmp_path / "ck").exists()  # nothing started, nothing written


async def test_run_stream_reports_progress_and_returns_the_committed_state(
    spark: Any, tmp_path: Path
) -> None:
    from reventless.spark.streamcli import run_stream

    url = f"sqlite:///{tmp_path / 's.db'}"
    app = rv.App(store=url)
    logs = declare(app)
    app.collect(stock_levels)
    async with app:
        await append(logs, _steps(30), {})
        await app.settle()
        live = await rows(app, stock_levels)
        heads = await app.store.partition_heads(["Inventory"])  # type: ignore[attr-defined]
    streamed = rv.App(store=url)  # the stream owns the model from an empty table on
    declare(streamed)
    app2_model = copy_of(stock_levels, "stock_levels_cli")
    streamed.collect(app2_model)
    seen: list[Any] = []
    state = run_stream(
        streamed,
        "stock_levels_cli",
        master="local[2]",  # the tests' session
        trigger="available",  # what the log holds, then the query ends
        checkpoint=tmp_path / "ck",
        on_progress=seen.append,
    )
    assert state is not None and state.positions == heads
    assert sum(p.rows_in for p in seen) == heads["Inventory", 0]
    assert all(p.seconds > 0 and p.lag == {"Inventory": 0} for p in seen[-1:])
    async with streamed:
        assert await rows(streamed, app2_model) == live


async def test_a_stream_next_to_a_running_live_collector_is_fenced_out(
    spark: Any, tmp_path: Path
) -> None:
    from reventless.errors import StreamFencedError

    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    logs = declare(app)
    app.collect(stock_levels)
    versions: dict[str, int] = {}
    async with app:
        await append(logs, _steps(10), versions)
        await app.settle()
        # started without pausing the live collector (hand_to_stream would pause it)
        running = start_stream(
            stock_levels, app, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms"
        )
        await append(logs, _steps(10, base=10), versions)
        await app.settle()  # the live collector moves the checkpoints first
        with pytest.raises(StreamFencedError, match="another collector runs this read model"):
            running.wait_until(lambda q: False, timeout=120)
        running.query.stop()
        assert await rows(app, stock_levels) == await _fold_rows(app)


async def _fold_rows(app: rv.App) -> list[Any]:
    from tests.spark.test_rebuild import _copy_rows

    return await _copy_rows(str(app.store.db.url), stock_levels)  # type: ignore[attr-defined]
