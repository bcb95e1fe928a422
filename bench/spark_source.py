"""``python -m bench.spark_source [--events N | --quick] [--store URL] [--out BENCHMARKS.md]``:
reading the log into Spark, three ways side by side in one run.

The log: N events of the shop's Inventory topic (StockAdded/StockReserved over N/10
SKUs) appended in bulk to a fresh SQLite file (or the ``--store`` PostgreSQL URL). Each
way reads every row and column once:

- *data source*: ``spark.read.format("reventless")`` (tasks by offset range, each
  reading the store itself and handing Arrow batches to Spark), written to Spark's
  ``noop`` sink so every column is materialised;
- *Parquet segments*: ``rv.spark.read_log`` (the driver exports the log to Parquet
  segments, Spark reads them; export and read are timed apart and together), the same
  ``noop`` write;
- *pyarrow*: ``EventLog.read_batches`` in this process (the store's Arrow read path,
  no Spark).

Spark runs on ``local[2]`` (``--master``), its session started and warmed up before the
clock runs. Rates are rows per wall second; ratios are against pyarrow.
Results go between ``<!-- spark_source:start -->`` and ``<!-- spark_source:end -->``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import reventless as rv

ROOT = Path(__file__).resolve().parents[1]
#: Events per append call (one aggregate each; group commit joins concurrent calls).
PER_CALL = 1_000


async def fill(log: Any, n: int) -> None:
    """``n`` Inventory events: SKU i gets ``PER_CALL`` events, 3 added for 1 reserved."""
    from examples.shop.model import StockAdded, StockReserved

    calls = []
    for i in range(0, n, PER_CALL):
        m = min(PER_CALL, n - i)
        events = [
            StockReserved(order_id=f"o-{i + j}", qty=1) if j % 4 == 3 else StockAdded(qty=1 + j % 7)
            for j in range(m)
        ]
        calls.append(log.append(f"sku-{i // PER_CALL}", events, expected_version=0))
        if len(calls) == 50:
            await asyncio.gather(*calls)
            calls = []
    await asyncio.gather(*calls)


def noop(df: Any) -> None:
    df.write.format("noop").mode("overwrite").save()


async def measure(url: str, n: int, master: str, work: Path) -> dict[str, float]:
    from examples.shop.model import Inventory
    from reventless.spark import read_log, session

    app = rv.App(store=url)
    log = app.event_log(Inventory)
    out: dict[str, float] = {}
    async with app:
        t = time.perf_counter()
        await fill(log, n)
        out["fill"] = time.perf_counter() - t
        head = await log.head()
        assert head == n, (head, n)
        spark = session(master)
        warm = spark.read.format("reventless").option("store", url).option("topic", log.name)
        slots = spark.sparkContext.defaultParallelism  # a Python worker up in every slot
        warm = warm.option("endingOffsets", "1001").option("eventsPerPartition", 1000 // slots)
        noop(warm.load())

        t = time.perf_counter()
        rows = 0
        async for batch in log.read_batches(batch_size=50_000, sealed=True):
            rows += batch.num_rows
        out["pyarrow"] = time.perf_counter() - t
        assert rows == n

        t = time.perf_counter()
        df = spark.read.format("reventless").option("store", url).option("topic", log.name)
        noop(df.load())
        out["source"] = time.perf_counter() - t

        t = time.perf_counter()
        frame = await read_log(log, spark=spark, source="parquet", workdir=work)
        out["export"] = time.perf_counter() - t
        t = time.perf_counter()
        noop(frame)
        out["parquet"] = time.perf_counter() - t
        out["tasks"] = df.load().rdd.getNumPartitions()
    return out


def report(n: int, r: dict[str, float], cmd: str, store: str) -> str:
    base = n / r["pyarrow"]

    def row(name: str, seconds: float) -> str:
        rate = n / seconds
        return f"| {name} | {seconds:,.1f} | {rate:,.0f} | {rate / base:.2f}x |"

    lines = [
        "",
        "## Reading the log into Spark: data source vs Parquet segments vs pyarrow",
        "",
        f"Command: `{cmd}`. {n:,} Inventory events in {store} (appended in "
        f"{r['fill']:,.0f} s), Spark local[2] warmed up; every row and column read once "
        f"(Spark: a `noop` write). The data source planned {int(r['tasks'])} tasks.",
        "",
        "| path | seconds | rows/s | vs pyarrow |",
        "|---|---|---|---|",
        row("pyarrow: `EventLog.read_batches` (one process, no Spark)", r["pyarrow"]),
        row('data source: `spark.read.format("reventless")`', r["source"]),
        row("Parquet segments: export + Spark read", r["export"] + r["parquet"]),
        row("Parquet segments: export only (driver)", r["export"]),
        row("Parquet segments: Spark read of exported segments", r["parquet"]),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_source")
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--quick", action="store_true", help="100,000 events")
    p.add_argument("--store", default=None, help="a PostgreSQL URL (default: a SQLite file)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--out", default=None, help="a markdown file to put the section into")
    a = p.parse_args(argv)
    n = 100_000 if a.quick else a.events
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # workers import the repo
    with tempfile.TemporaryDirectory(prefix="rv-bench-source-") as tmp:
        url = a.store or f"sqlite:///{Path(tmp) / 'log.db'}"
        store = "PostgreSQL" if a.store else "a SQLite file"
        r = asyncio.run(measure(url, n, a.master, Path(tmp) / "spark"))
    cmd = (
        "python -m bench.spark_source "
        + ("--quick" if a.quick else f"--events {n}")
        + (" --store postgresql://..." if a.store else "")
    )
    block = report(n, r, cmd, store)
    print(block)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "spark_source", block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
