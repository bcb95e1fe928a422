"""``python -m bench.profile [--out BENCHMARKS.md]``: where the command path's CPU goes.

Each workload runs twice on a fresh SQLite file with ``synchronous=OFF`` (no fsync, so
what is left is Python and SQLite's own work): once plain, for its CPU time per operation
(the whole process, ``time.process_time``), and once under ``cProfile`` (the event loop's
thread: the writer thread's statements of a group commit are not in it, nor the reader
threads' Arrow pages of a batch or fold catch-up, nor the fold, which runs in the writer
thread's transaction). The profiles go
to ``bench/profiles/<workload>.txt`` (the top functions by own time and by cumulative
time); the summary table, with each workload's five most expensive functions by own
time, goes into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import reventless as rv

from .blocks import put_block
from .core import count_catch_up, new_aggregates, streams
from .specs import VIEWS, Counter, Increment
from .workloads import rv_preload

PROFILES = Path(__file__).resolve().parent / "profiles"
ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def _app(path: Path) -> rv.App:
    return rv.App(store=f"sqlite:///{path / 'rv.db'}?synchronous=OFF", broker="memory://")


# Each workload: given a fresh directory and a profiler (or None), run the timed part
# (under the profiler if given) and return the operations it did and its CPU seconds.
Work = Callable[[Path, cProfile.Profile | None], Awaitable[tuple[int, float]]]


def _timed(prof: cProfile.Profile | None) -> tuple[Callable[[], None], Callable[[], float]]:
    c0 = [0.0]

    def start() -> None:
        c0[0] = time.process_time()
        if prof is not None:
            prof.enable()

    def stop() -> float:
        if prof is not None:
            prof.disable()
        return time.process_time() - c0[0]

    return start, stop


async def sequential(path: Path, prof: cProfile.Profile | None) -> tuple[int, float]:
    app, n = _app(path), 5000
    log = app.event_log(Counter)
    async with app:
        for _ in range(100):
            await log.execute("seq", Increment(by=1))
        start, stop = _timed(prof)
        start()
        for _ in range(n):
            await log.execute("seq", Increment(by=1))
        return n, stop()


async def in_flight(path: Path, prof: cProfile.Profile | None) -> tuple[int, float]:
    app, workers, per = _app(path), 64, 80
    log = app.event_log(Counter)
    async with app:
        start, stop = _timed(prof)
        await streams(log, workers, per, start)
        return workers * per, stop()


async def _new_aggregates(
    bulk: str, path: Path, prof: cProfile.Profile | None
) -> tuple[int, float]:
    app, calls, per = _app(path), 10, 1000
    log = app.event_log(Counter)
    async with app:
        await log.execute("warm", Increment(by=1))
        start, stop = _timed(prof)
        start()
        for c in range(calls):
            await new_aggregates(log, bulk, c, per)
        return calls * per, stop()


async def catch_up(
    path: Path, prof: cProfile.Profile | None, how: str = "handler"
) -> tuple[int, float]:
    """A fresh collector over 50,000 events: ``handler`` (counting, per event), ``batch``
    (counting, ``on_batch``), ``upsert`` (a read model, a row upserted per event) or
    ``fold`` (the same read model as ``ColumnUpserts``)."""
    pre = _app(path)
    log = pre.event_log(Counter)
    async with pre:
        await rv_preload(log, "cu", 500, 100)
    start, stop = _timed(prof)
    start()
    if how in ("fold", "upsert"):
        app = _app(path)
        app.event_log(Counter)
        app.collect(VIEWS["fold" if how == "fold" else "handler"])
        async with app:
            await app.settle(timeout=600)
        return 500 * 100, stop()
    seen, _ = await count_catch_up(_app(path), batch=how == "batch")
    return seen, stop()


WORKLOADS: dict[str, tuple[str, Work]] = {
    "sequential": ("sequential commands, 1 event each (`execute`)", sequential),
    "in_flight": ("64 commands in flight (`execute`, group commit)", in_flight),
    "execute_many": (
        "1000 new aggregates per call (`execute_many`)",
        partial(_new_aggregates, "execute_many"),
    ),
    "append_many": (
        "1000 new aggregates per call (`append_many`)",
        partial(_new_aggregates, "append_many"),
    ),
    "catch_up": ("collector catch-up, counting handler (per event)", catch_up),
    "catch_up_batch": (
        "collector catch-up, counting batch handler (`on_batch`, per event)",
        partial(catch_up, how="batch"),
    ),
    "catch_up_upsert": (
        "read-model catch-up, a row upserted per event (per event)",
        partial(catch_up, how="upsert"),
    ),
    "catch_up_fold": (
        "read-model catch-up, `ColumnUpserts` (per event)",
        partial(catch_up, how="fold"),
    ),
}


def _where(func: tuple[str, int, str]) -> str:
    file, line, name = func
    file = file.replace(ROOT, "")
    file = re.sub(r".*/site-packages/", "", file)
    file = re.sub(r".*/lib/python3\.\d+/", "", file)
    return f"{name} ({file}:{line})" if line else name


def _top(stats: pstats.Stats, key: str, n: int) -> list[tuple[float, str]]:
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    index = 2 if key == "tottime" else 3
    rows = sorted(raw.items(), key=lambda kv: kv[1][index], reverse=True)[:n]
    return [(v[index] / total, _where(func)) for func, v in rows]


def run(name: str) -> tuple[float, list[tuple[float, str]]]:
    """CPU per operation (plain run, microseconds) and the top functions by own time."""
    title, work = WORKLOADS[name]
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as profiled:
        ops, cpu = asyncio.run(work(Path(plain), None))
        prof = cProfile.Profile()
        asyncio.run(work(Path(profiled), prof))
    stats = pstats.Stats(prof, stream=io.StringIO())
    per_op = cpu / ops * 1e6
    lines = [
        f"# {title}: {per_op:.1f} us CPU per operation without the profiler",
        "# (python -m bench.profile; SQLite file, synchronous=OFF; cProfile of the event",
        "# loop's thread, shares of its profiled time)",
        "",
        "own time:",
        *(f"  {share:6.1%}  {where}" for share, where in _top(stats, "tottime", 25)),
        "",
        "cumulative time:",
        *(f"  {share:6.1%}  {where}" for share, where in _top(stats, "cumtime", 25)),
    ]
    PROFILES.mkdir(exist_ok=True)
    (PROFILES / f"{name}.txt").write_text("\n".join(lines) + "\n")
    return per_op, _top(stats, "tottime", 5)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    ap.add_argument("--only", default="", help="comma-separated workloads")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    names = [n for n in WORKLOADS if not a.only or n in a.only.split(",")]
    parts = [
        "## Where the CPU goes (profiles)",
        "",
        "Command: `python -m bench.profile` (SQLite file, `synchronous=OFF`). CPU per "
        "operation from a plain run; the five functions with the most own time from a "
        "`cProfile` run of the event loop's thread (shares of its profiled time; the "
        "profiler inflates small calls). The CPU per operation is this process's: a SQLite "
        "file's Arrow helper processes, which read the pages of every catch-up, are not in "
        "it. Full profiles: `bench/profiles/<workload>.txt`.",
        "",
        "| workload | us CPU per op | most own time |",
        "|---|--:|---|",
    ]
    for name in names:
        per_op, top = run(name)
        print(f"{name:<14} {per_op:7.1f} us/op", flush=True)
        cells = "<br>".join(f"{share:.0%} `{where}`" for share, where in top)
        parts.append(f"| {WORKLOADS[name][0]} | {per_op:.1f} | {cells} |")
    text = "\n".join(parts)
    print("\n" + text)
    if a.out is not None:
        put_block(a.out, "profiles", text)


if __name__ == "__main__":
    main()
