"""``python -m bench.commit_overlap [--store sqlite|postgres|all] [--events N] [--rounds R]
[--out FILE]``: a side-effect catch-up with its page commits behind handling
(``CollectorOptions(overlap_commits=True)``) beside one that commits page by page
(``False``), in one run.

One log of ``--events`` events (100 per aggregate) is filled per store; each round then
runs four fresh collectors over it, alternating the order of the two settings from round
to round: a counting per-event handler and a counting batch handler (``on_batch``), each
with commits behind and page by page. A run is ``App.start`` (whose catch-up reads the
log in pages of 2,000 with a durable checkpoint per page) until ``settle``. The table
shows per store and handler the median rate of each setting and their ratio (> 1: the
overlap is faster), and where the loop waited in commits: the seconds the catch-up spent
inside ``Collector.commit`` (for commits behind, waiting for the page before to land).
SQLite: a file, WAL and ``synchronous=FULL``; PostgreSQL: the benchmark server's fresh
database. The default of each store is marked.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import reventless as rv
from reventless.collect.collector import Collector

from .blocks import put_block
from .core import _app, count_catch_up, warm_helpers
from .pgserver import PgServer
from .specs import Counter
from .workloads import Where, check, rv_preload

PER = 100


class _Waits:
    """Seconds spent inside ``Collector.commit`` (every collector of the process)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @contextmanager
    def counting(self) -> Iterator[None]:
        original = Collector.commit

        async def commit(c: Collector, *a: Any, **kw: Any) -> bool:
            t0 = time.perf_counter()
            try:
                return await original(c, *a, **kw)
            finally:
                self.seconds += time.perf_counter() - t0

        Collector.commit = commit  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            Collector.commit = original  # type: ignore[method-assign]


async def _fill(where: Where, aggs: int) -> None:
    app = _app(where)
    log = app.event_log(Counter)
    async with app:
        await rv_preload(log, "co", aggs, PER)


async def _catch_up(
    where: Where, name: str, batch: bool, overlap: bool, events: int
) -> tuple[float, float, float]:
    """A fresh collector ``name`` catching up the whole log: (events/s, seconds waited in
    commits, CPU seconds of this process)."""
    options = rv.AppOptions(collector=rv.CollectorOptions(overlap_commits=overlap))
    app = _app(where, options=options)
    waits = _Waits()
    with waits.counting():
        c0 = time.process_time()
        seen, dt = await count_catch_up(app, name, batch=batch)
        cpu = time.process_time() - c0
    check(seen == events, "a catch-up that counted every event")
    return seen / dt, waits.seconds, cpu


async def _warm(where: Where) -> None:
    """Open the store once and start the store's Arrow helpers (outside the timers)."""
    app = _app(where)
    app.event_log(Counter)
    async with app:
        await warm_helpers(app)


def _store_rows(store: str, where: Where, events: int, rounds: int) -> list[str]:
    aggs = events // PER
    asyncio.run(_fill(where, aggs))
    asyncio.run(_warm(where))
    got: dict[tuple[bool, bool], list[tuple[float, float, float]]] = {}
    k = 0
    for r in range(rounds):
        for batch in (False, True):
            order = (True, False) if r % 2 == 0 else (False, True)
            for overlap in order:
                k += 1
                run = _catch_up(where, f"co{k}", batch, overlap, aggs * PER)
                rate, waited, cpu = asyncio.run(run)
                got.setdefault((batch, overlap), []).append((rate, waited, cpu))
                print(
                    f"round {r + 1}/{rounds} {store} {'batch' if batch else 'event'} "
                    f"overlap={overlap}: {rate:,.0f} events/s, {waited:.2f} s in commits, "
                    f"{cpu:.2f} s of CPU",
                    flush=True,
                )
    default = store == "postgres"
    rows = []
    for batch in (False, True):
        mon, moff = (statistics.median(x[0] for x in got[(batch, o)]) for o in (True, False))
        won, woff = (statistics.median(x[1] for x in got[(batch, o)]) for o in (True, False))
        con, coff = (statistics.median(x[2] for x in got[(batch, o)]) for o in (True, False))
        what = "counting batch handler (`on_batch`)" if batch else "counting per-event handler"
        rows.append(
            f"| {store} | {what} | {mon:,.0f}{' (default)' if default else ''} | "
            f"{moff:,.0f}{'' if default else ' (default)'} | {mon / moff:.2f}x | "
            f"{won:.2f} / {woff:.2f} | {con:.2f} / {coff:.2f} |"
        )
    return rows


def run(stores: list[str], events: int, rounds: int) -> str:
    rows: list[str] = []
    t0 = time.perf_counter()
    for store in stores:
        if store == "sqlite":
            with tempfile.TemporaryDirectory() as d:
                rows += _store_rows(store, Path(d), events, rounds)
        else:
            with PgServer() as server:
                rows += _store_rows(store, server.new_db("overlap"), events, rounds)
    took = time.perf_counter() - t0
    which = "all" if len(stores) == 2 else stores[0]
    return "\n".join(
        [
            "## Commits behind handling: a side-effect catch-up, overlap on and off",
            "",
            f"Command: `python -m bench.commit_overlap --store {which} --events {events} "
            f"--rounds {rounds}` ({took:.0f} s). A catch-up of {events:,} events from "
            "`App.start` to `settle`, pages of 2,000 with a durable checkpoint each "
            "(SQLite: WAL, `synchronous=FULL`); medians of the rounds, the two settings "
            "alternating. Waited: seconds inside `Collector.commit` per catch-up; CPU: "
            "seconds of this process's CPU (all its threads; not the Arrow helper processes "
            "of a SQLite file, nor the server), on / off.",
            "",
            "| store | handler | overlap on, events/s | page by page, events/s | on / off "
            "| waited in commits, s | CPU, s |",
            "|---|---|--:|--:|--:|--:|--:|",
            *rows,
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.commit_overlap", description=__doc__)
    ap.add_argument("--store", choices=["sqlite", "postgres", "all"], default="all")
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    stores = ["sqlite", "postgres"] if args.store == "all" else [args.store]
    body = run(stores, args.events, args.rounds)
    print(body)
    if args.out is not None:
        put_block(args.out, "commit_overlap", body)


if __name__ == "__main__":
    main()
