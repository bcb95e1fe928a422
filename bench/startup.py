"""``python -m bench.startup [--events N] [--rounds R] [--out FILE]``: a process that
starts with a backlog, as a deployed one does.

Each measurement is a fresh Python process that opens a copy of one SQLite file
(``synchronous=FULL``) holding ``N`` events and starts an App whose collector catches up
from offset 0 inside ``App.start``: a counting side effect, or a read model with a row
upsert per event (``bench.specs.totals``). With the default ``gc_freeze=True`` the
start-up heap is frozen before the collectors start; ``gc_freeze=False`` is the catch-up
with nothing frozen (how it ran before the freeze moved ahead of the collectors). Per
cell: the median rate, and the seconds the cyclic collector took (``gc.callbacks``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import reventless as rv

from .blocks import put_block
from .core import count_catch_up
from .specs import VIEWS, Counter
from .workloads import rv_preload

KINDS = ("counting", "upsert")


async def _preload(path: Path, events: int) -> None:
    app = rv.App(store=f"sqlite:///{path}", options=rv.AppOptions(gc_freeze=False))
    log = app.event_log(Counter)
    async with app:
        await rv_preload(log, "cu", events // 100, 100)


async def _child(path: Path, kind: str, freeze: bool) -> dict[str, float]:
    """One catch-up in this (fresh) process: its rate and the cyclic collector's seconds."""
    spent = [0.0, 0.0]

    def timed(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            spent[1] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - spent[1]

    gc.callbacks.append(timed)
    app = rv.App(store=f"sqlite:///{path}", options=rv.AppOptions(gc_freeze=freeze))
    app.event_log(Counter)
    t0 = time.perf_counter()
    if kind == "counting":
        n, _ = await count_catch_up(app)
    else:
        view = app.collect(VIEWS["handler"])
        async with app:
            await app.settle(timeout=600)
            n = sum(r.events for r in await view.all())
    return {"events": n, "rate": n / (time.perf_counter() - t0), "gc": spent[0]}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", nargs=3, metavar=("DB", "KIND", "FREEZE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        db, kind, freeze = a.child
        print(json.dumps(asyncio.run(_child(Path(db), kind, freeze == "1"))))
        return
    started = time.perf_counter()
    got: dict[tuple[str, bool], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="rvstartup-") as tmp:
        base = Path(tmp) / "base.db"
        asyncio.run(_preload(base, a.events))
        for rnd in range(a.rounds):
            for kind in KINDS:
                for freeze in (True, False) if rnd % 2 == 0 else (False, True):
                    db = Path(tmp) / "run.db"
                    for f in Path(tmp).glob("run.db*"):
                        f.unlink()
                    shutil.copyfile(base, db)
                    flag = "1" if freeze else "0"
                    out = subprocess.run(
                        [sys.executable, "-m", "bench.startup", "--child", str(db), kind, flag],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    cell = json.loads(out.stdout.strip().splitlines()[-1])
                    if int(cell["events"]) != a.events:
                        raise SystemExit(f"{kind}: caught up {cell['events']} of {a.events}")
                    got.setdefault((kind, freeze), []).append(cell)
                    print(
                        f"round {rnd + 1}/{a.rounds} {kind:<9} gc_freeze={freeze!s:<5} "
                        f"{cell['rate']:>10,.0f} events/s, gc {cell['gc']:.2f} s",
                        flush=True,
                    )
    lines = [
        "## A catch-up at start-up (SQLite file)",
        "",
        f"Command: `python -m bench.startup --events {a.events} --rounds {a.rounds}` "
        f"({time.perf_counter() - started:.0f} s). Each cell: a fresh process catching up "
        f"{a.events:,} events inside `App.start` (`synchronous=FULL`), the median over the "
        "rounds (the order alternates), and the seconds the cyclic garbage collector took.",
        "",
        "| catch-up | `gc_freeze=True` (frozen before the collectors) | `gc_freeze=False` "
        "(nothing frozen) | ratio |",
        "|---|--:|--:|--:|",
    ]
    for kind in KINDS:
        on, off = got[(kind, True)], got[(kind, False)]
        r_on = statistics.median(c["rate"] for c in on)
        r_off = statistics.median(c["rate"] for c in off)
        g_on = statistics.median(c["gc"] for c in on)
        g_off = statistics.median(c["gc"] for c in off)
        lines.append(
            f"| {kind} | {r_on:,.0f} events/s (gc {g_on:.2f} s) | "
            f"{r_off:,.0f} events/s (gc {g_off:.2f} s) | {r_on / r_off:.2f}x |"
        )
    text = "\n".join(lines)
    print(text)
    if a.out is not None:
        put_block(a.out, "startup", text)


if __name__ == "__main__":
    main()
