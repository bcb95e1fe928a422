"""``python -m bench.scaling [--sizes 1000000,10000000] [--store sqlite|postgres]
[--out FILE]``: how the rates grow with the log, and what memory reading it takes.

One store grows to each size in turn (bulk appends of 1000-event aggregates, their rate
measured per step). At each size, on that store: sequential one-event commands on a new
aggregate, loads of a 1000-event aggregate (the default snapshot every 100 events), a
counting collector catching up from offset 0 over the whole log, and ``read_batches``
over the whole log. Catch-up and reads run in a fresh process each, whose peak resident
memory (``ru_maxrss``) is reported. The plot (``bench/plots/scaling.png``) shows each
rate against the log's size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import reventless as rv

from .blocks import put_block
from .pgserver import PgServer
from .specs import Counter, Increment, Incremented

ROOT = Path(__file__).resolve().parent.parent
perf = time.perf_counter


def _app(url: str) -> rv.App:
    return rv.App(store=url, broker="memory://", options=rv.AppOptions(publish=False))


async def grow(url: str, start: int, upto: int) -> float:
    """Append events ``start``..``upto`` (1000 per aggregate, 20 appends in flight)."""
    app = _app(url)
    log = app.event_log(Counter)
    events = [Incremented(by=1) for _ in range(1000)]
    async with app:
        t0 = perf()
        for base in range(start, upto, 20_000):
            n = min(20, (upto - base) // 1000)
            await asyncio.gather(
                *(
                    log.append(f"g-{(base // 1000) + i}", events, expected_version=0)
                    for i in range(n)
                )
            )
        return (upto - start) / (perf() - t0)


async def commands_and_loads(url: str, size: int) -> tuple[float, float]:
    app = _app(url)
    log = app.event_log(Counter)
    async with app:
        t0, n = perf(), 500
        for _ in range(n):
            await log.execute(f"seq-{size}", Increment(by=1))
        cmd_rate = n / (perf() - t0)
        ids = [f"g-{i}" for i in range(0, size // 1000, max(1, size // 1000 // 20))][:20]
        t0 = perf()
        for a in ids:
            log.forget([a])
            agg = await log.load(a)
            assert agg.value == 1000, (a, agg.value)
        load_rate = len(ids) / (perf() - t0)
    return cmd_rate, load_rate


def _child(kind: str, url: str, size: int) -> dict[str, float]:
    """Run ``kind`` (catchup | read) in a fresh process: its rate and peak RSS."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.scaling", "--child", kind, "--url", url, "--size", str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def child_catchup(url: str, size: int) -> float:
    from .core import count_catch_up

    seen, dt = await count_catch_up(_app(url), f"count_{time.time_ns()}", timeout=3600)
    assert seen >= size, (seen, size)
    return seen / dt


async def child_read(url: str, size: int) -> float:
    app = _app(url)
    log = app.event_log(Counter)
    async with app:
        t0, n = perf(), 0
        async for batch in log.read_batches():
            n += batch.num_rows
        dt = perf() - t0
    assert n >= size, (n, size)
    return n / dt


def child_main(kind: str, url: str, size: int) -> None:
    fn = child_catchup if kind == "catchup" else child_read
    rate = asyncio.run(fn(url, size))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the largest of the store's Arrow helper processes (stopped with the App)
    helper_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"rate": rate, "rss_mb": rss_mb, "helper_mb": helper_mb}))


def plot(rows: list[dict[str, Any]], path: Path, store: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["size"] / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label in (
        ("append", "bulk append (events/s)"),
        ("catchup", "catch-up from 0, counting (events/s)"),
        ("read", "read_batches (events/s)"),
        ("loads", "loads of a 1000-event aggregate (loads/s)"),
        ("commands", "sequential commands (cmd/s)"),
    ):
        ax.plot(sizes, [r[key] for r in rows], marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xscale("log")
    ax.set_xlabel("events in the log (millions)")
    ax.set_ylabel("rate (log scale)")
    ax.set_title(f"Rates against the log's size ({store})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--plot", type=Path, default=None, help="default: bench/plots/scaling[-postgres].png"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child_main(a.child, a.url, a.size)
        return
    sizes = sorted(int(s) for s in a.sizes.split(","))
    plot_to = a.plot or ROOT / "bench" / "plots" / (
        "scaling.png" if a.store == "sqlite" else f"scaling-{a.store}.png"
    )
    rows: list[dict[str, Any]] = []
    started = perf()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="rvscale-"))
        if a.store == "postgres":
            url = stack.enter_context(PgServer()).new_db("scaling").url
        else:
            url = f"sqlite:///{Path(tmp) / 'rv.db'}?synchronous=FULL"
        have = 0
        for size in sizes:
            append = asyncio.run(grow(url, have, size))
            have = size
            cmds, loads = asyncio.run(commands_and_loads(url, size))
            cu = _child("catchup", url, size)
            rd = _child("read", url, size)
            row = {
                "size": size,
                "append": append,
                "commands": cmds,
                "loads": loads,
                "catchup": cu["rate"],
                "catchup_rss": cu["rss_mb"],
                "read": rd["rate"],
                "read_rss": rd["rss_mb"],
                "helper_rss": max(rd.get("helper_mb", 0.0), cu.get("helper_mb", 0.0)),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    command = f"python -m bench.scaling --sizes {a.sizes} --store {a.store}"
    lines = [
        f"## How the rates grow with the log ({a.store})",
        "",
        f"Command: `{command}` ({perf() - started:.0f} s; one store grown to each size in turn; "
        + (
            "SQLite: WAL, `synchronous=FULL`"
            if a.store == "sqlite"
            else "PostgreSQL: the server `PGHOST`/`PGPORT` name (127.0.0.1:5432 by default), its "
            "settings (fsync on, synchronous_commit on)"
        )
        + "; catch-up and reads in a fresh process each, peak RSS "
        "from `ru_maxrss`: the process's, and apart the largest of its Arrow helper processes, "
        "which read the store's pages). Plot: "
        f"`{plot_to.relative_to(ROOT)}`.",
        "",
        "| events in the log | bulk append (events/s, this step) | sequential commands (cmd/s) "
        "| loads of a 1000-event aggregate, default snapshots (loads/s) "
        "| catch-up from 0, counting (events/s) "
        "| catch-up peak RSS | read_batches (events/s) | read peak RSS "
        "| peak RSS of an Arrow helper process |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']:,} | {r['append']:,.0f} | {r['commands']:,.0f} | {r['loads']:,.0f} "
            f"| {r['catchup']:,.0f} | {r['catchup_rss']:,.0f} MB | {r['read']:,.0f} "
            f"| {r['read_rss']:,.0f} MB | {r['helper_rss']:,.0f} MB |"
        )
    text = "\n".join(lines)
    print("\n" + text)
    plot(rows, plot_to, a.store)
    if a.out is not None:
        put_block(a.out, f"scaling-{a.store}", text)


if __name__ == "__main__":
    main()
