"""``python -m bench.quick --out FILE``: the smoke run of every benchmark (``make bench
QUICK=1``), small sizes and one repetition, in one interpreter.

Each benchmark runs as its own command would (``python -m bench.X --quick ...``: the
same ``main``, the same arguments, its section of ``FILE``), one after another. Running
them in one process pays the imports (reventless, pyarrow, pydantic, SQLAlchemy,
eventsourcing: about a second) once instead of a dozen times; the benchmarks that measure
other processes (gateway, DCB, schedules, JetStream, Spark) still start those. The
seconds each took are printed at the end, and the run fails if any failed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import inspect
import sys
import time
import traceback

#: (module, its arguments besides ``--out``), in the order ``make bench`` runs them.
PLAN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bench", ("--store", "all", "--quick", "--reps", "1")),
    ("bench.nats_fanout", ("--postgres", "--quick", "--reps", "1")),
    ("bench.aws", ("--quick",)),
    ("bench.spark", ("--quick",)),
    ("bench.subscribe", ("--rows", "5000")),
    ("bench.collector_where", ("--rows", "5000")),
    ("bench.gateway", ("--quick", "--postgres")),
    ("bench.dcb", ("--quick", "--postgres")),
    ("bench.schedules", ("--quick", "--postgres")),
    ("bench.compression", ("--quick",)),
    ("bench.personal", ("--quick",)),
    ("bench.core", ("--quick", "--rounds", "1")),
    ("bench.startup", ("--events", "20000", "--rounds", "1")),
    ("bench.live_types", ("--events", "20000", "--rounds", "1")),
)


def run_one(module: str, args: list[str]) -> int:
    """``python -m module *args`` in this process: its exit status."""
    mod = importlib.import_module("bench.__main__" if module == "bench" else module)
    saved = sys.argv
    sys.argv = [f"python -m {module}", *args]
    try:
        got = mod.main()
        if inspect.iscoroutine(got):
            got = asyncio.run(got)
    except SystemExit as exc:
        got = exc.code
    finally:
        sys.argv = saved
    return got if isinstance(got, int) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quick", description=__doc__)
    p.add_argument("--out", required=True, help="the Markdown report to update")
    p.add_argument("--only", default=None, help="comma-separated modules, e.g. bench.core")
    a = p.parse_args(argv)
    only = None if a.only is None else set(a.only.split(","))
    took: list[tuple[str, float, int]] = []
    t0 = time.perf_counter()
    for module, args in PLAN:
        if only is not None and module not in only:
            continue
        print(f"== python -m {module} {' '.join(args)}", flush=True)
        # what the runs before left (modules, caches) out of the collector's way, so each
        # benchmark's collections (its own, and bench's gc.collect() before each
        # measurement) see about what a fresh process would
        gc.collect()
        gc.freeze()
        start = time.perf_counter()
        try:
            status = run_one(module, [*args, "--out", a.out])
        except Exception:
            traceback.print_exc()
            status = 1
        took.append((module, time.perf_counter() - start, status))
    print(f"\nquick benchmarks: {time.perf_counter() - t0:.1f} s")
    for module, seconds, status in took:
        print(f"  {seconds:6.1f} s  {module}{'' if status == 0 else f'  FAILED ({status})'}")
    return 1 if any(status for _, _, status in took) else 0


if __name__ == "__main__":
    sys.exit(main())
