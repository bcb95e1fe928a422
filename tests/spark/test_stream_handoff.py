"""Hand-offs (rebuild -> stream, live collector -> stream -> live collector) and a driver
killed with SIGKILL mid-stream: no event applied twice or missed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from examples.shop.model import stock_levels
from reventless.spark import rebuild
from reventless.spark.stream import open_sink
from reventless.spark.streamhandoff import hand_to_collector, hand_to_stream
from reventless.spark.streamrun import start_stream
from reventless.store import require_sql
from tests.spark.conftest import ROOT, executors
from tests.spark.shoplog import append as append_steps
from tests.spark.shoplog import declare
from tests.spark.streamlog import copy_of, rows
from tests.spark.test_rebuild import _copy_rows
from tests.spark.test_stream import _steps

pytestmark = pytest.mark.spark


async def _heads(app: rv.App) -> dict[tuple[str, int], int]:
    return await require_sql(app.store, "heads").partition_heads(["Inventory"])


async def test_a_stream_continues_a_rebuild_from_its_offsets(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    app = rv.App(store=url)
    logs = declare(app)
    model = copy_of(stock_levels, "stock_levels_handed")
    versions: dict[str, int] = {}
    async with app:
        await append_steps(logs, _steps(30), versions)
        report = await rebuild(model, app, spark=spark, workdir=tmp_path / "w")
        await append_steps(logs, _steps(30, base=30), versions)  # after the rebuild's offsets
        running = start_stream(model, app, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms")
        try:
            await asyncio.to_thread(running.wait_for_positions, await _heads(app))
        finally:
            running.stop()
        got = await rows(app, model)
        # the stream read only what the rebuild had not: events after its offsets
        read = sum(p.rows_in for p in running.progress)
        assert read == (await _heads(app))["Inventory", 0] - report.upto["Inventory"] > 0
    assert got == await _copy_rows(url, stock_levels)


async def test_live_collector_hands_the_read_model_to_a_stream_and_back(
    spark: Any, tmp_path: Path, shared_url: str
) -> None:
    url = shared_url  # a SQLite file, a PostgreSQL schema (read by the data source too)
    app = rv.App(store=url)
    logs = declare(app)
    view = app.collect(stock_levels)
    versions: dict[str, int] = {}
    async with app:
        await append_steps(logs, _steps(20), versions)
        await app.settle()
        collector = app.collector(stock_levels.name)
        running = await hand_to_stream(
            stock_levels, app, spark=spark, checkpoint=tmp_path / "ck", trigger="200ms"
        )
        processed = collector.processed
        await append_steps(logs, _steps(20, base=20), versions)  # the stream's to apply
        await asyncio.to_thread(running.wait_for_positions, await _heads(app))
        assert collector.processed == processed  # the paused collector applied none of them
        handed = await hand_to_collector(running, app)
        assert handed == (running.state().positions if running.state() else None)
        await append_steps(logs, _steps(20, base=40), versions)  # the collector's again
        await app.settle()
        live = await view.all()
        assert collector.processed > processed
    assert live == await _copy_rows(url, stock_levels)


@pytest.mark.slow
async def test_a_driver_killed_mid_stream_restarts_without_loss_or_doubles(
    spark_ready: None, tmp_path: Path
) -> None:
    from tests.spark.streamproc import killed

    url = f"sqlite:///{tmp_path / 's.db'}"
    app = rv.App(store=url)
    logs = declare(app)
    async with app:
        await append_steps(logs, _steps(200), {})
        heads = await _heads(app)
    sink = open_sink(killed, url)

    def batch() -> int:
        st = sink.state_sync(killed.name)
        return -1 if st is None else st.batch_id

    proc = _driver(url, tmp_path / "ck")
    try:
        _until(lambda: batch() >= 2, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        proc.wait()
    at_kill = sink.state_sync(killed.name)
    assert at_kill is not None and at_kill.positions["Inventory", 0] < heads["Inventory", 0]
    proc = _driver(url, tmp_path / "ck")
    try:
        _until(lambda: _reached(sink, heads), proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = sink.state_sync(killed.name)
    assert done is not None and done.run == at_kill.run and done.batch_id > at_kill.batch_id
    again = rv.App(store=url)
    declare(again)
    async with again:
        assert await rows(again, killed) == await _copy_rows(url, stock_levels)


@pytest.mark.slow
async def test_a_stream_on_the_loopback_standalone_cluster_with_two_workers(
    standalone: Any, tmp_path: Path
) -> None:
    from tests.spark.streamproc import killed

    url = f"sqlite:///{tmp_path / 's.db'}"
    app = rv.App(store=url)
    logs = declare(app)
    async with app:
        await append_steps(logs, _steps(150), {})
        heads = await _heads(app)
    sink = open_sink(killed, url)
    before = executors(standalone)
    proc = _driver(url, tmp_path / "ck", standalone.master)
    try:
        _until(lambda: _reached(sink, heads), proc, timeout=240)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(executors(standalone) - before) >= 2  # both workers ran an executor
    again = rv.App(store=url)
    declare(again)
    async with again:
        assert await rows(again, killed) == await _copy_rows(url, stock_levels)


def _driver(url: str, checkpoint: Path, master: str = "local[2]") -> subprocess.Popen[bytes]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.spark.streamproc", url, str(checkpoint), master],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _reached(sink: Any, heads: dict[tuple[str, int], int]) -> bool:
    st = sink.state_sync("stock_levels_killed")
    return st is not None and all(st.positions.get(p, 0) >= h for p, h in heads.items())


def _until(done: Any, proc: subprocess.Popen[bytes], timeout: float = 150.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, "the streaming driver exited"
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
