"""``python -m bench.live_types [--events N] [--rounds R] [--out FILE]``: what a live
collector costs per topic event when it takes one event type of a topic that mostly
carries another.

A topic of two event types, nine ``Big`` events to one ``Small``, is appended with
``append_many`` (200 aggregates of ten events per call, SQLite file, ``synchronous=OFF``,
the in-memory broker) while a side effect runs live, and the process's CPU time is taken
from the first append until the collector has settled. Three runs per round, in rotating
order: no collector (the appends and the relay alone), a side effect taking ``Small`` only
(``on(Small)``), and the same side effect taking both types and ignoring ``Big`` in its
handler. A collector's cost is its run's CPU minus the no-collector run's, per topic event
(medians over the rounds). The one-type collector drops ``Big`` from the broker's Arrow
batches before they become rows (``Collector.wanted_types``); the two-type one decodes
and calls its handler for every event.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import reventless as rv

from .blocks import put_block

PER_CALL, PER_AGG = 200, 10


class Big(rv.Event):
    a: int
    b: str
    c: float


class Small(rv.Event):
    n: int


class Noop(rv.Command):
    pass


class Thing(rv.Aggregate):
    events = Big | Small

    @rv.handles(Noop)
    def noop(self, cmd: Noop) -> list[Big]:
        return []

    @rv.applies(Big)
    def _big(self, e: Big) -> None:
        pass

    @rv.applies(Small)
    def _small(self, e: Small) -> None:
        pass


KINDS = ("none", "one type", "both types")


def _effect(kind: str, seen: list[int]) -> rv.SideEffectHandler | None:
    if kind == "none":
        return None
    fx = rv.SideEffectHandler("smalls")
    if kind == "one type":

        @fx.on(Small)
        def _one(ev: rv.Envelope[Small]) -> None:
            seen[0] += 1

    else:

        @fx.on(Small, Big)
        def _both(ev: rv.Envelope[Any]) -> None:
            if ev.type == "Small":
                seen[0] += 1

    return fx


async def run_one(kind: str, events: int) -> float:
    """CPU seconds of appending ``events`` and settling the collector of ``kind``."""
    seen = [0]
    calls = events // (PER_CALL * PER_AGG)
    with tempfile.TemporaryDirectory() as tmp:
        app = rv.App(store=f"sqlite:///{Path(tmp) / 'rv.db'}?synchronous=OFF")
        log = app.event_log(Thing)
        fx = _effect(kind, seen)
        if fx is not None:
            app.collect(fx)
        batch = [Big(a=i, b="x" * 20, c=1.5) for i in range(PER_AGG - 1)] + [Small(n=1)]
        async with app:
            await app.settle()
            c0 = time.process_time()
            for c in range(calls):
                await log.append_many((f"t-{c}-{i}", batch, 0) for i in range(PER_CALL))
            await app.settle()
            cpu = time.process_time() - c0
    if fx is not None and seen[0] != calls * PER_CALL:
        raise SystemExit(f"{kind}: saw {seen[0]} Small events, expected {calls * PER_CALL}")
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.live_types", description=__doc__)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    events = a.events - a.events % (PER_CALL * PER_AGG)
    got: dict[str, list[float]] = {k: [] for k in KINDS}
    for r in range(a.rounds):
        order = KINDS[r % 3 :] + KINDS[: r % 3]
        for kind in order:
            cpu = asyncio.run(run_one(kind, events))
            got[kind].append(cpu)
            print(f"round {r + 1}/{a.rounds} {kind:<10} {cpu / events * 1e6:6.2f} us/event")
    base = statistics.median(got["none"]) / events * 1e6
    cost = {
        k: statistics.median(c - n for c, n in zip(got[k], got["none"], strict=True)) / events * 1e6
        for k in KINDS[1:]
    }
    text = "\n".join(
        [
            "## A live collector taking one event type of two (SQLite file)",
            "",
            f"Command: `python -m bench.live_types --events {a.events} --rounds {a.rounds}` "
            f"({events:,} events, nine `Big` to one `Small`, appended with `append_many` "
            "at `synchronous=OFF` while a side effect runs live on the in-memory broker; "
            "process CPU from the first append to `settle`, medians over the rounds). "
            f"The appends and the relay alone: {base:.2f} us of CPU per event.",
            "",
            "| side effect | its CPU per topic event (us) |",
            "|---|--:|",
            *(
                f"| `{'on(Small)' if k == 'one type' else 'on(Small, Big)'}` | {v:.2f} |"
                for k, v in cost.items()
            ),
        ]
    )
    print("\n" + text)
    if a.out is not None:
        put_block(a.out, "live_types", text)


if __name__ == "__main__":
    main()
