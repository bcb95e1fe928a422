"""``python -m bench.catchup_floor [--events N] [--rounds R] [--out FILE]``: what a
per-event handler's catch-up cannot go below, beside raw's read and commit.

A catch-up with a per-event handler (``@handler.on(Event)``) gives each handler call a
typed envelope. On the event loop's thread, whatever else the pipeline does, each event
costs at least: its stored columns as Python values, its event model, its metadata, its
envelope, and the handler's call. This script measures those steps alone, in ns per
event, on Arrow pages of 2,000 events read from a SQLite file beforehand (the pages a
catch-up's helper processes read; neither their reading nor any commit is timed), with
the garbage collector on as in any process. Each step's row includes the steps above
it. Beside them, in the same run: raw's counting catch-up (``bench.core``'s: pages of
five undecoded columns and a durable checkpoint per page, ``synchronous=FULL``), and
reventless's own counting catch-up of the same log.

The "ceiling" of a step is the rate a catch-up would reach if that step were all it
did: one second divided by its cost. When even the last step's ceiling is under 70% of
raw's rate, target 6 of the performance issue (a per-event counting handler at >= 70%
of raw) cannot be met by any pipeline that builds a typed envelope per event on one
thread of CPython: reading, committing and scheduling only come on top.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pyarrow as pa

import reventless as rv
from reventless.codec import CORRELATION_AT, FIELDS_AT, SCHEMA_VERSION_AT, TENANT_AT, TYPE_AT
from reventless.decode import envelopes_of_arrow

from .blocks import put_block
from .core import _app, _raw_catchup_count, _rv_catchup_count, warm_helpers
from .specs import Counter, Incremented
from .workloads import rv_preload

PAGE = 2000
#: The metadata columns (correlation id .. tenant), in ``Metadata``'s field order.
_META = slice(CORRELATION_AT, TENANT_AT + 1)


async def _pages(where: Path, aggs: int, per: int) -> tuple[rv.EventLog[Counter], list[pa.Table]]:
    """Fill a SQLite file with ``aggs`` x ``per`` events; its Arrow pages, read whole."""
    app = _app(where, "OFF")
    log = app.event_log(Counter)
    pages: list[pa.Table] = []
    async with app:
        await rv_preload(log, "cu", aggs, per)
        await warm_helpers(app)
        start = 1
        while True:
            page = await app.store.read_columns(log.name, start, PAGE)
            if not len(page):
                break
            if not isinstance(page, pa.Table):
                raise SystemExit("the store gave rows, not Arrow pages")
            pages.append(page)
            start += len(page)
    return log, pages


def _steps(log: rv.EventLog[Counter], pages: list[pa.Table]) -> list[tuple[str, Callable[[], int]]]:
    """The measured steps, each over all ``pages``."""
    schema, topic = log.schema, log.name
    decode = schema.decoders[(Incremented.event_type, 1)]
    meta_of = partial(tuple.__new__, rv.Metadata)
    seen = [0]

    async def handler(ev: rv.Envelope[Incremented]) -> None:
        seen[0] += 1

    # Each step keeps one page's objects alive at a time, as a catch-up does (a page is
    # handled, then dropped): objects kept longer cost more garbage-collector passes.
    def events() -> int:
        n = 0
        for p in pages:
            fields = (c.to_pylist() for c in p.columns[FIELDS_AT:])
            n += len(list(map(decode, zip(*fields, strict=True))))
        return n

    def metadata() -> int:
        n = 0
        for p in pages:
            keys = zip(*(c.to_pylist() for c in p.columns[_META]), strict=True)
            n += len(list(map(meta_of, keys)))
        return n

    def envelopes() -> int:
        return sum(len(envelopes_of_arrow(schema, topic, p)) for p in pages)

    def called() -> int:
        async def run() -> None:
            for p in pages:
                for ev in envelopes_of_arrow(schema, topic, p):
                    await handler(ev)

        seen[0] = 0
        asyncio.run(run())
        return seen[0]

    for p in pages:  # one event type at its current version (the decoder above)
        assert p.column(TYPE_AT).unique().to_pylist() == [Incremented.event_type]
        assert p.column(SCHEMA_VERSION_AT).unique().to_pylist() == [1]
    return [
        ("part: the typed events alone (field columns, the generated decoder)", events),
        ("part: the metadata alone (its six columns, a named tuple each)", metadata),
        ("the envelopes as a catch-up makes them (`envelopes_of_arrow`)", envelopes),
        ("the envelopes and an async handler's call per envelope (the floor)", called),
    ]


def _time(fn: Callable[[], int], n: int, rounds: int) -> float:
    """Median ns per event of ``fn`` over ``rounds`` runs (garbage collector on), after a
    warm-up run that must make all ``n`` events."""
    if fn() != n:
        raise SystemExit("a step did not make every event")
    got = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        got.append((time.perf_counter() - t0) / n * 1e9)
    return statistics.median(got)


def run(events: int, rounds: int) -> str:
    per = 100
    aggs = events // per
    n = aggs * per
    with tempfile.TemporaryDirectory() as d:
        log, pages = asyncio.run(_pages(Path(d), aggs, per))
        assert sum(len(p) for p in pages) == n
        steps = [(what, _time(fn, n, rounds)) for what, fn in _steps(log, pages)]
        del pages
    raws, ours = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as d:
            raws.append(_raw_catchup_count(Path(d), aggs, per))
        with tempfile.TemporaryDirectory() as d:
            ours.append(asyncio.run(_rv_catchup_count(Path(d), aggs, per)))
    raw, real = statistics.median(raws), statistics.median(ours)
    lines = [
        "## Catch-up floor: what a per-event handler cannot go below",
        "",
        f"Command: `python -m bench.catchup_floor --events {events} --rounds {rounds}`. "
        f"{n:,} events in Arrow pages of {PAGE:,}, read from a SQLite file beforehand "
        "(reading and commits not timed), the event loop's thread, the garbage collector "
        f"on; medians of {rounds} runs. Raw: `bench.core`'s counting catch-up (five "
        "undecoded columns, a durable checkpoint per page, `synchronous=FULL`), and "
        "reventless's own counting catch-up of the same log, in the same run.",
        "",
        "| step | ns per event | ceiling, events/s | ceiling / raw |",
        "|---|--:|--:|--:|",
    ]
    for what, ns in steps:
        ceiling = 1e9 / ns
        lines.append(f"| {what} | {ns:,.0f} | {ceiling:,.0f} | {ceiling / raw:.2f}x |")
    lines += [
        f"| raw counting catch-up (read, commit per page) | {1e9 / raw:,.0f} | {raw:,.0f} | "
        "1.00x |",
        f"| reventless counting catch-up (per-event handler) | {1e9 / real:,.0f} | "
        f"{real:,.0f} | {real / raw:.2f}x |",
    ]
    last = 1e9 / steps[-1][1] / raw
    verdict = "under" if last < 0.7 else "not under"
    lines += [
        "",
        f"The last step's ceiling is {last:.2f}x raw, {verdict} the 0.70x of target 6.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.catchup_floor", description=__doc__)
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    body = run(args.events, args.rounds)
    print(body)
    if args.out is not None:
        put_block(args.out, "catchup_floor", body)


if __name__ == "__main__":
    main()
