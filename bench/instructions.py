"""``python -m bench.instructions [--base REF] [--only KEY,...] [--out FILE]``: CPU
instructions per operation of the command paths, counted by valgrind (callgrind), for the
working tree and, with ``--base``, for a git ref beside it.

A count does not depend on what else the machine is doing, so a change of a few percent
shows where timings on a shared machine swing by more than that. Each workload runs in a
fresh interpreter under ``valgrind --tool=callgrind`` twice, with ``small`` and ``large``
operations; ``(instructions(large) - instructions(small)) / (large - small)`` is the count
per operation without the interpreter's start-up. Every thread of the process is counted
(the SQLite writer's included); child processes are not (the store's Arrow helpers,
which read a catch-up's pages). The catch-up's log is filled by an uncounted run first.
The store is a SQLite file with ``synchronous=OFF`` and the in-memory broker (no
subscriber). Every run has ``PYTHONHASHSEED=0``: with random hash seeds, the start-up's
own count (class creation fills type slots through dict lookups whose collisions depend on
the seed) moved by more than a thousand sequential commands cost. The counts still vary
between runs (clock readings, when the garbage collector runs).

Each side runs this module's ``CHILD`` script with its own ``reventless`` on the path
(``bench.ab``'s trees), so ``--base`` may name a ref from before this module existed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .ab import ROOT, side_env, unpack
from .blocks import put_block

#: The workloads: key -> (what one operation is, small, large).
WORKLOADS: dict[str, tuple[str, int, int]] = {
    "seq": ("sequential command, 1 event (`execute`)", 20, 1020),
    "exec10": ("sequential command, 10 events (`execute`)", 10, 510),
    "execute_many": ("command on a new aggregate, `execute_many` of 1000", 1000, 11000),
    "append_many": ("new aggregate, `append_many` of 1000", 1000, 11000),
    "catch_up": ("event of a catch-up, counting handler (this process only)", 10000, 40000),
    "catch_up_cmds": (
        "event of a catch-up of one-event commands' events (each its own correlation id)",
        10000,
        40000,
    ),
}

#: Workloads whose store is filled first by an uncounted run of ``CHILD <fill>``: bulk
#: appends of 100 events per aggregate (one correlation id per call), or one command per
#: event (``execute``: each event correlated by its own id, as most commands' are).
FILLED = {"catch_up": "fill", "catch_up_cmds": "fill_cmds"}

#: The model of the child scripts (``bench.command_split``'s too).
MODEL = """
import asyncio, sys
import reventless as rv


class Incremented(rv.Event):
    by: int = 1


class Increment(rv.Command):
    by: int = 1


class Tally(rv.Command):
    times: int = 10


class Counter(rv.Aggregate):
    events = Incremented
    value: int = 0

    @rv.handles(Increment)
    def increment(self, cmd: Increment) -> Incremented:
        return Incremented(by=cmd.by)

    @rv.handles(Tally)
    def tally(self, cmd: Tally) -> list[Incremented]:
        return [Incremented(by=1) for _ in range(cmd.times)]

    @rv.applies(Incremented)
    def _inc(self, e: Incremented) -> None:
        self.value += e.by

"""

#: Run in each tree: ``python CHILD <workload> <operations> <dir>``.
CHILD = (
    MODEL
    + """


async def main(workload: str, n: int, where: str) -> None:
    app = rv.App(store=f"sqlite:///{where}/rv.db?synchronous=OFF", broker="memory://")
    log = app.event_log(Counter)
    seen = [0]
    if workload.startswith("catch_up"):  # a fresh side effect from offset 0 over the filled log
        counter = rv.SideEffectHandler("count")

        @counter.on(Incremented)
        async def _count(ev: rv.Envelope[Incremented]) -> None:
            seen[0] += 1

        app.collect(counter)
    async with app:
        if workload == "fill":  # aggregates of 100 events (uncounted: before catch_up)
            for c in range(n // 1000):
                await log.append_many(
                    (f"cu-{c}-{i}", [Incremented(by=1)] * 100, 0) for i in range(10)
                )
            return
        if workload == "fill_cmds":
            for i in range(n):
                await log.execute(f"cu-{i % 100}", Increment(by=1))
            return
        if workload.startswith("catch_up"):
            await app.settle(timeout=600)
            assert seen[0] == n, seen
            return
        await log.execute("warm", Increment(by=1))
        if workload == "seq":
            for _ in range(n):
                await log.execute("warm", Increment(by=1))
        elif workload == "exec10":
            for _ in range(n):
                await log.execute("warm", Tally())
        elif workload == "execute_many":
            for c in range(n // 1000):
                await log.execute_many((f"n-{c}-{i}", Increment(by=1)) for i in range(1000))
        elif workload == "append_many":
            for c in range(n // 1000):
                await log.append_many(
                    (f"n-{c}-{i}", [Incremented(by=1)], 0) for i in range(1000)
                )
        else:
            raise SystemExit(f"unknown workload {workload}")


asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""
)

COLLECTED = re.compile(r"Collected : (\d+)")


def count(tree: Path, child: Path, workload: str, n: int) -> int:
    """Instructions of one run of ``workload`` with ``n`` operations in ``tree`` (after an
    uncounted ``fill`` of ``n`` events for a workload in ``FILLED``)."""
    env = {**side_env(tree), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as where:
        if workload in FILLED:
            subprocess.run(
                [sys.executable, str(child), FILLED[workload], str(n), where],
                cwd=tree,
                env=env,
                capture_output=True,
                check=True,
            )
        got = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                str(child),
                workload,
                str(n),
                where,
            ],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = COLLECTED.search(got.stderr)
    if found is None:
        raise SystemExit(f"no instruction count from valgrind:\n{got.stderr[-2000:]}")
    return int(found.group(1))


def per_op(tree: Path, child: Path, workload: str) -> float:
    """Instructions per operation of ``workload`` in ``tree`` (two runs, in parallel)."""
    _, small, large = WORKLOADS[workload]
    with ThreadPoolExecutor(2) as pool:
        lo, hi = pool.map(lambda n: count(tree, child, workload, n), (small, large))
    return (hi - lo) / (large - small)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.instructions")
    ap.add_argument("--base", help="a git ref to count beside the working tree")
    ap.add_argument("--only", default="", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--out", type=Path, help="put the table into this file (BENCHMARKS.md)")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    keys = [k for k in a.only.split(",") if k] or list(WORKLOADS)
    for k in keys:
        if k not in WORKLOADS:
            raise SystemExit(f"unknown workload {k!r}; choose from {', '.join(WORKLOADS)}")
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(CHILD)
        trees = {"working tree": ROOT}
        if a.base:
            trees = {a.base: unpack(a.base, Path(tmp), "base"), "working tree": ROOT}
        got = {(name, k): per_op(tree, child, k) for k in keys for name, tree in trees.items()}
    heads = " | ".join(trees)
    lines = [
        f"| operation | {heads} |" + (" change |" if a.base else ""),
        "|---|" + "--:|" * len(trees) + ("--:|" if a.base else ""),
    ]
    for k in keys:
        cells = " | ".join(f"{got[name, k]:,.0f}" for name in trees)
        change = ""
        if a.base:
            change = f" {got['working tree', k] / got[a.base, k] - 1:+.1%} |"
        lines.append(f"| {WORKLOADS[k][0]} | {cells} |{change}")
    command = "python -m bench.instructions" + (f" --base {a.base}" if a.base else "")
    command += f" --only {a.only}" if a.only else ""
    body = "\n".join(
        [
            "### CPU instructions per operation (callgrind)",
            "",
            f"Command: `{command}` (valgrind's callgrind, every thread of the process; "
            "SQLite file, `synchronous=OFF`, `PYTHONHASHSEED=0`; see "
            "`bench/instructions.py`). Counts do not depend on the machine's load; with "
            "random hash seeds they varied between runs by about 1% on the bulk paths and "
            "up to 5% for sequential commands.",
            "",
            *lines,
        ]
    )
    print(body)
    if a.out:
        put_block(a.out, "instructions", body)


if __name__ == "__main__":
    main()
