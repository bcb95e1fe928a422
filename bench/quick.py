"""``python -m bench.quick --out FILE``: the smoke run of every benchmark (``make bench
QUICK=1``), small sizes and one repetition, in one interpreter.

Each benchmark runs as its own command would (``python -m bench.X --quick ...``: the
same ``main``, the same arguments, its section of ``FILE``), one after another. Running
them in one process pays the imports (reventless, pyarrow, pydantic, SQLAlchemy,
eventsourcing: about a second) once instead of a dozen times; the benchmarks that measure
other processes (gateway, DCB, schedules, JetStream, Spark) still start those. Spark's
(most of its time is its JVM starting) and the command path's (``BESIDE``) run in
processes of their own, one after the other, beside the rest, their sections merged into
``FILE`` at the end: the numbers of a quick run are a smoke test's, taken on shared
cores. The seconds each took are printed at the end, and the run fails if any failed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import inspect
import re
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from .blocks import put_block

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


#: Run one after another in processes of their own, beside the others (see the module's
#: text): the two longest quick runs after the main harness.
BESIDE = frozenset({"bench.spark", "bench.core"})

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"<!-- (\S+):start -->\n(.*?)<!-- \1:end -->", re.S)


def merge(part: Path, out: Path) -> None:
    """Put every section of ``part`` into ``out`` (``put_block``) and remove ``part``."""
    if part.exists():
        for name, body in _BLOCK.findall(part.read_text()):
            put_block(out, name, body)
        part.unlink()


def _lane(commands: list[tuple[str, list[str]]], ended: dict[str, tuple[float, int]]) -> None:
    """Run each module's command in turn from the repository's root, each in a process
    of its own; their seconds and exit statuses into ``ended``."""
    for module, command in commands:
        print(f"== {' '.join(command[1:])} (beside the others)", flush=True)
        start = time.perf_counter()
        status = subprocess.run(command, cwd=ROOT, check=False).returncode
        ended[module] = (time.perf_counter() - start, status)


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
    out = Path(a.out)
    part = out.resolve().parent / ".beside.part.md"  # (their plots beside the report)
    lane = [
        (module, [sys.executable, "-m", module, *args, "--out", str(part)])
        for module, args in PLAN
        if module in BESIDE and (only is None or module in only)
    ]
    ended: dict[str, tuple[float, int]] = {}  # module -> its seconds, exit status
    watch = threading.Thread(target=_lane, args=(lane, ended), daemon=True)
    watch.start()
    for module, args in PLAN:
        if (only is not None and module not in only) or module in BESIDE:
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
    watch.join()
    took += [(module, *ended.get(module, (0.0, 1))) for module, _ in lane]
    merge(part, out)
    print(f"\nquick benchmarks: {time.perf_counter() - t0:.1f} s")
    for module, seconds, status in took:
        print(f"  {seconds:6.1f} s  {module}{'' if status == 0 else f'  FAILED ({status})'}")
    return 1 if any(status for _, _, status in took) else 0


if __name__ == "__main__":
    sys.exit(main())
