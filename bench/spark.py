"""``python -m bench.spark [--quick] [--sizes N,..] [--work DIR] [--out BENCHMARKS.md]``: Spark
rebuilds.

Measures, on Parquet segments of the shop's Inventory topic (N StockAdded/StockReserved
events over N/10 SKUs, written with pyarrow in the segment format the store exports):
the rebuild's Spark job through the Python handlers (``stock_levels``, local[2]), the
vectorised path (``stock_counters``), a pyarrow baseline (latest state per key), peak RSS
of the driver + JVM + Python workers, and (full mode) 1 vs 2 workers on a loopback
standalone cluster. The store export and the SQL load are not in these numbers (the job
writes the final rows to Parquet staging, as ``rebuild`` does before loading them).
While the Python-handler job runs, the RSS of the executor's processes is sampled from
``/proc`` (local mode: one executor, the driver's JVM, and its Python workers): the JVM's
peak, the largest Python worker's peak and the peak of all Python workers together.
``--sizes`` picks the event counts (local[2] only, no cluster runs); ``--work`` keeps the
generated segments in a directory to reuse across runs.
Results go between ``<!-- spark:start -->`` and ``<!-- spark:end -->`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.blocks import put_block

ROOT = Path(__file__).resolve().parents[1]


def make_segments(directory: Path, n: int, chunk: int = 1_000_000) -> None:
    """N Inventory events as segment files (Spark form of the topic schema)."""
    from examples.shop.model import Inventory
    from reventless.codec import TopicSchema
    from reventless.decode import retired_models
    from reventless.spark.arrow import spark_schema

    ts = TopicSchema.from_events("Inventory", [*Inventory.event_classes, *retired_models([])])
    schema = spark_schema(ts.arrow_schema)
    directory.mkdir(parents=True, exist_ok=True)
    skus = max(1, n // 10)
    for first in range(1, n + 1, chunk):
        last = min(n, first + chunk - 1)
        off = pa.array(range(first, last + 1), pa.int64())
        m = len(off)
        idx = pc.subtract(off, 1)
        sku = pc.binary_join_element_wise("sku-", pc.cast(pc.remainder(idx, skus), pa.string()), "")
        reserved = pc.equal(pc.remainder(idx, 4), 3)
        cols: dict[str, pa.Array] = {
            "_offset": off,
            "_row_idx": pa.array([0] * m, pa.int32()),
            "_produced_at": pc.cast(pc.add(off, 1_700_000_000_000_000), pa.timestamp("us", "UTC")),
            "_aggregate_id": sku,
            "_version": pc.add(pc.divide(idx, skus), 1),
            "_type": pc.if_else(reserved, "StockReserved", "StockAdded"),
            "_schema_version": pa.array([1] * m, pa.int32()),
            "_msg_id": pc.cast(off, pa.string()),
            "_partition": pa.array([0] * m, pa.int32()),
            "qty": pc.add(pc.remainder(idx, 7), 1),
            "order_id": pc.if_else(
                reserved, pc.cast(off, pa.string()), pa.scalar(None, pa.string())
            ),
        }
        arrays = [cols.get(f.name, pa.nulls(m, f.type)) for f in schema]
        table = pa.Table.from_arrays(
            [pc.cast(a, f.type) for a, f in zip(arrays, schema, strict=True)], schema=schema
        )
        pq.write_table(table, directory / f"seg-{first:020d}-{last:020d}.parquet")


def rss_mb(spark: Any) -> float:
    """Peak RSS of this driver plus the JVM and its children (Python workers)."""
    total = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    jvm = spark.sparkContext._gateway.proc.pid
    pids = [jvm]
    try:
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(jvm)], capture_output=True, text=True
        )
        pids += [int(p) for p in out.stdout.split()]
    except OSError:
        pass
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            pass
    return total


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class ExecutorMemory:
    """Peak RSS of a local executor's processes while a job runs, sampled from ``/proc``:
    ``jvm_mb`` (the JVM), ``worker_mb`` (the largest Python worker), ``workers_mb`` (all
    Python processes under the JVM together, at their joint peak)."""

    def __init__(self, jvm: int, every: float = 0.2) -> None:
        self.jvm, self.every = jvm, every
        self.jvm_mb = self.worker_mb = self.workers_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ExecutorMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """Read the RSS of the JVM and every process below it once."""
        kids = _children()
        below, todo = [], list(kids.get(self.jvm, []))
        while todo:
            pid = todo.pop()
            below.append(pid)
            todo += kids.get(pid, [])
        sizes = [_rss_mb(p) for p in below]
        self.jvm_mb = max(self.jvm_mb, _rss_mb(self.jvm))
        self.worker_mb = max([self.worker_mb, *sizes])
        self.workers_mb = max(self.workers_mb, sum(sizes))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)
        self.sample()


def job(spark: Any, model: Any, segs: Path, stage: Path, fast: bool, n: int) -> tuple[float, int]:
    """The rebuild's Spark job over ``n`` events (segments -> final rows in Parquet staging)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    import reventless as rv
    from reventless.spark.arrow import spark_schema
    from reventless.spark.rebuild import _events, _fold, plan
    from reventless.spark.vector import compile_upserts
    from tests.spark.shoplog import declare

    app = rv.App(store="sqlite://")
    declare(app)
    plans = plan(model, app)
    struct = from_arrow_schema(spark_schema(app.topics["Inventory"].arrow_schema))
    t0 = time.perf_counter()
    frame = spark.read.schema(struct).parquet(str(segs))
    compiled = compile_upserts(model, plans) if fast else None
    if compiled is not None:
        rows, _ = compiled([frame])
    else:
        counter = spark.sparkContext.accumulator(0)
        rows = _fold(spark, model, plans, _events([frame], plans, None), counter, None, n)
    rows.write.mode("overwrite").parquet(str(stage))
    seconds = time.perf_counter() - t0
    return seconds, pq.read_table(stage).num_rows


def pyarrow_baseline(segs: Path) -> float:
    t0 = time.perf_counter()
    table = pq.read_table(segs, columns=["_offset", "_aggregate_id", "_type", "qty"])
    table.group_by("_aggregate_id").aggregate([("qty", "sum"), ("_offset", "max")])
    return time.perf_counter() - t0


def measure(master: str, sizes: list[int], work: Path, cluster: bool) -> list[dict[str, Any]]:
    from examples.shop.model import stock_levels
    from examples.shop.stats import stock_counters
    from reventless.spark import session

    spark = session(master, conf={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"})
    jvm = spark.sparkContext._gateway.proc.pid
    out = []
    for n in sizes:
        segs = work / f"segs-{n}"
        if not segs.exists():
            make_segments(segs, n)
        rows: dict[str, Any] = {"n": n, "master": master}
        job(spark, stock_counters, segs, work / "warm", True, n)  # JIT and caches
        with ExecutorMemory(jvm) if not cluster else nullcontext() as mem:
            rows["python_s"], rows["python_rows"] = job(
                spark, stock_levels, segs, work / "st1", False, n
            )
        if mem is not None:
            rows["jvm_mb"], rows["worker_mb"] = mem.jvm_mb, mem.worker_mb
            rows["workers_mb"] = mem.workers_mb
        rows["load"] = os.getloadavg()[0]
        if not cluster:
            rows["vector_s"], rows["vector_rows"] = job(
                spark, stock_counters, segs, work / "st2", True, n
            )
            rows["pyarrow_s"] = pyarrow_baseline(segs)
        rows["rss_mb"] = rss_mb(spark)
        out.append(rows)
        print(json.dumps(rows), file=sys.stderr, flush=True)
    spark.stop()
    return out


def _child(master: str, sizes: list[int], work: Path, cluster: bool) -> list[dict[str, Any]]:
    """Run ``measure`` in a fresh process (one Spark driver per process)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
    args = [sys.executable, "-m", "bench.spark", "--child", master, "--work", str(work)]
    args += ["--sizes", ",".join(map(str, sizes))] + (["--cluster"] if cluster else [])
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    result: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(local: list[dict[str, Any]], clusters: dict[int, list[dict[str, Any]]], cmd: str) -> str:
    lines = [
        "## Spark rebuilds (`python -m bench.spark`)",
        "",
        f"Command: `{cmd}`. Shop Inventory topic (3/4 StockAdded, 1/4 StockReserved, N/10 SKUs) as "
        "Parquet segments; the rebuild's Spark job from segments to staged final rows (export "
        "from the store and the SQL load excluded). `stock_levels` runs its decorated Python "
        "handlers in executors; `stock_counters` is declared with `rv.ColumnUpserts` and "
        "compiled to Spark SQL. Warm session (a first job ran before). Executor memory: peak "
        "RSS sampled every 0.2 s while the Python-handler job runs (local mode has one executor: "
        "the JVM, plus its Python workers; the largest worker and all workers together). Peak "
        "RSS (all) = driver + JVM + Python workers over the whole session (VmHWM). Load = the "
        "machine's 1-minute load average after the run (2 cores, shared).",
        "",
        "| events | master | Python handlers | vectorised | pyarrow baseline "
        "| executor JVM | Python worker | all Python workers | peak RSS (all) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in local:
        n = r["n"]
        lines.append(
            f"| {n:,} | {r['master']} | {r['python_s']:.1f} s ({n / r['python_s']:,.0f} ev/s) | "
            f"{r['vector_s']:.1f} s ({n / r['vector_s']:,.0f} ev/s) | {r['pyarrow_s']:.2f} s | "
            f"{r['jvm_mb']:,.0f} MB | {r['worker_mb']:,.0f} MB | {r['workers_mb']:,.0f} MB | "
            f"{r['rss_mb']:,.0f} MB | {r['load']:.1f} |"
        )
    if clusters:
        lines += [
            "",
            "Standalone cluster on loopback (1 core, 1 GB per worker), Python handlers:",
            "",
        ]
        lines += ["| events | workers | seconds | events/s |", "|---|---|---|---|"]
        for w, rows in sorted(clusters.items()):
            for r in rows:
                lines.append(
                    f"| {r['n']:,} | {w} | {r['python_s']:.1f} | {r['n'] / r['python_s']:,.0f} |"
                )
        one, two = clusters.get(1), clusters.get(2)
        if one and two:
            lines += ["", f"2 workers vs 1: {one[0]['python_s'] / two[0]['python_s']:.2f}x."]
    big = [r for r in local if r["n"] >= 10_000_000]
    python_goal = "not measured (quick mode)"
    if big:
        secs = big[0]["python_s"]
        python_goal = f"{'met' if secs <= 60 else 'NOT met'} ({secs:.0f} s)"
    vector_goal = ", ".join(
        f"{'met' if rate >= 1e6 else 'NOT met'} at {r['n']:,} ({rate:,.0f}/s)"
        for r in local
        for rate in [r["n"] / r["vector_s"]]
    )
    lines += [
        "",
        f"Targets: 10M events through Python handlers <= 60 s on local[2]: {python_goal}; "
        f"vectorised >= 1M events/s: {vector_goal}.",
    ]
    return "\n".join(lines) + "\n"


def _plot(local: list[dict[str, Any]], base: Path) -> None:
    """Save the points (``bench/results/spark.json`` beside ``--out``) and draw the plot
    of rebuild seconds by events (``bench/plots/rebuild_vs_events.png``)."""
    from bench.plots import rebuild_vs_events

    series = {
        "Python handlers (local[2])": [[r["n"], r["python_s"]] for r in local],
        "vectorised (Spark SQL)": [[r["n"], r["vector_s"]] for r in local],
        "pyarrow baseline (latest state)": [[r["n"], r["pyarrow_s"]] for r in local],
    }
    points = base / "bench" / "results" / "spark.json"
    points.parent.mkdir(parents=True, exist_ok=True)
    points.write_text(json.dumps(series, indent=1) + "\n")
    rebuild_vs_events(points, base / "bench" / "plots" / "rebuild_vs_events.png")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark")
    p.add_argument("--quick", action="store_true", help="20k events, local only")
    p.add_argument("--out", default=None, help="Markdown file to update")
    p.add_argument(
        "--sizes", default=None, help="event counts, e.g. 10000000 (local[2] only, no cluster)"
    )
    p.add_argument("--work", default=None, help="keep generated segments here and reuse them")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cluster", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        sizes = [int(s) for s in a.sizes.split(",")]
        print(json.dumps(measure(a.child, sizes, Path(a.work), a.cluster)))
        return 0
    cmd = "python -m bench.spark" + (" --quick" if a.quick else "")
    cmd += f" --sizes {a.sizes}" if a.sizes else ""
    with tempfile.TemporaryDirectory() if a.work is None else nullcontext(a.work) as tmp:
        work = Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        sizes = [20_000] if a.quick else [100_000, 1_000_000, 10_000_000]
        sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else sizes
        local = _child("local[2]", sizes, work, False)
        clusters: dict[int, list[dict[str, Any]]] = {}
        if not a.quick and not a.sizes:
            from reventless.spark.standalone import LocalCluster

            for w in (1, 2):
                with LocalCluster(workers=w, workdir=work / f"c{w}", pythonpath=str(ROOT)) as c:
                    clusters[w] = _child(c.master, [1_000_000], work, True)
    text = report(local, clusters, cmd)
    print(text)
    if a.out:
        out = Path(a.out)
        _plot(local, out.resolve().parent)
        put_block(out, "spark", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
