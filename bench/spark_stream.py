"""Streaming projections on Spark: sustained events/s into a windowed aggregate and
end-to-end latency (append -> row in the read-model table) per trigger interval.
``python -m bench.spark_stream [--events N] [--probes K] [--out BENCHMARKS.md]``

A SQLite file store with the shop's ``Inventory`` log; the pipeline reads it through the
``reventless`` data source, keeps ``StockAdded``, windows ``_produced_at`` by minute with
a one-minute watermark and sums units per SKU and minute into a read model; each
micro-batch commits its rows and position in one transaction (``rv.spark.start_stream``).

*Sustained*: with the query warm (a first batch done), ``--events`` events are appended
at once (1,000 per append, 10 SKUs); events/s from the append's start until the
committed position reaches the head (ingest included, Spark's first read of them too).
*Latency*: per trigger interval, a fresh query; ``--probes`` times one event of a new
SKU is appended and the table is polled every 5 ms until its row appears (median and
worst). On ``local[2]`` (``REVENTLESS_SPARK_MASTER`` to change), shuffle partitions 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import reventless as rv
from examples.shop.model import Inventory, StockAdded


class SkuMinute(BaseModel):
    id: str
    sku: str
    units: int
    events: int


per_minute: rv.ReadModel[SkuMinute] = rv.ReadModel("bench_sku_minutes", row=SkuMinute, key="id")


def pipeline(topics: Any) -> Any:
    from pyspark.sql import functions as F

    added = topics["Inventory"].where(F.col("_type") == StockAdded.event_type)
    agg = (
        added.withWatermark("_produced_at", "1 minute")
        .groupBy(F.window("_produced_at", "1 minute"), F.col("_aggregate_id").alias("sku"))
        .agg(F.sum("qty").alias("units"), F.count(F.lit(1)).alias("events"))
    )
    return agg.select(
        F.concat_ws("@", "sku", F.date_format("window.start", "HH:mm")).alias("id"),
        "sku",
        F.col("units").cast("long").alias("units"),
        F.col("events").cast("long").alias("events"),
    )


async def _append(log: rv.EventLog[Any], sku: str, n: int, versions: dict[str, int]) -> None:
    v = versions.get(sku, 0)
    await log.append(sku, [StockAdded(qty=1)] * n, expected_version=v)
    versions[sku] = v + n


def _has_row(running: Any, sku: str) -> bool:
    sink = running.sink
    sql = f"SELECT 1 FROM {sink.table.table} WHERE sku = {sink.db.mark}"
    return bool(sink.db.read_sync(lambda conn: conn.exec_driver_sql(sql, (sku,)).first()))


async def run(events: int, probes: int, triggers: list[str], work: Path) -> list[tuple[str, str]]:
    from reventless.spark import session
    from reventless.spark.streamrun import start_stream

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master = os.environ.get("REVENTLESS_SPARK_MASTER", "local[2]")
    spark = session(master, conf={"spark.sql.shuffle.partitions": "2"})
    app = rv.App(store=f"sqlite:///{work / 'bench.db'}")
    log = app.event_log(Inventory)
    versions: dict[str, int] = {}
    out: list[tuple[str, str]] = []
    async with app:
        await _append(log, "warm", 10, versions)
        heads = await app.store.partition_heads(["Inventory"])  # type: ignore[attr-defined]
        running = start_stream(
            per_minute, app, pipeline, spark=spark, checkpoint=work / "ck-sustained", trigger="0.1s"
        )
        await asyncio.to_thread(running.wait_for_positions, heads, 300)
        t0 = time.perf_counter()
        for i in range(0, events, 1000):
            await _append(log, f"sku-{i // 1000 % 10}", min(1000, events - i), versions)
        appended = time.perf_counter() - t0
        heads = await app.store.partition_heads(["Inventory"])  # type: ignore[attr-defined]
        await asyncio.to_thread(running.wait_for_positions, heads, 600)
        took = time.perf_counter() - t0
        batches = [p for p in running.progress if p.rows_in]
        running.stop()
        out.append(
            (
                f"sustained, {events:,} events (appends took {appended:.1f} s)",
                f"{events / took:,.0f} events/s ({took:.1f} s, {len(batches)} batches)",
            )
        )
        for trigger in triggers:
            running = start_stream(
                per_minute,
                app,
                pipeline,
                spark=spark,
                checkpoint=work / f"ck-{trigger}",
                trigger=trigger,
            )
            heads = await app.store.partition_heads(["Inventory"])  # type: ignore[attr-defined]
            await asyncio.to_thread(running.wait_for_positions, heads, 300)
            lat = []
            for k in range(probes):
                sku = f"probe-{trigger}-{k}"
                t = time.perf_counter()
                await _append(log, sku, 1, versions)
                while not _has_row(running, sku):
                    running.raise_failure()
                    await asyncio.sleep(0.005)
                lat.append(time.perf_counter() - t)
            running.stop()
            out.append(
                (
                    f"latency, trigger {trigger} ({probes} appends)",
                    f"median {statistics.median(lat) * 1000:,.0f} ms, "
                    f"max {max(lat) * 1000:,.0f} ms",
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_stream")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--triggers", default="0.5s,1s,2s")
    ap.add_argument("--out", default=None, help="a markdown file to put the section into")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rv-bench-stream-"))
    try:
        rows = asyncio.run(run(a.events, a.probes, a.triggers.split(","), work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = "\n".join(
        [
            "### Streaming projection on Spark (local[2], windowed aggregate, SQLite file)",
            "",
            f"Command: `python -m bench.spark_stream --events {a.events}`. Events appended "
            "at once, then read by the `reventless` data source into a windowed sum per SKU "
            "and minute committed to a read model; latency: one append, then the time until "
            "its row is committed, per trigger interval.",
            "",
            "| measure | result |",
            "|---|---|",
            *(f"| {m} | {r} |" for m, r in rows),
        ]
    )
    print(body)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "spark_stream", body)


if __name__ == "__main__":
    main()
