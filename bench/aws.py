"""SNS/SQS through moto: API calls per event at steady state, and per-aggregate order.

``python -m bench.aws [--events 10000] [--quick]`` starts a private ``moto_server`` on a
free loopback port and runs an App (SQLite store, ``sns+sqs://`` broker) with a read
model that fails on any out-of-order event. A producer executes commands at a steady
rate for a fixed count; the broker counts every HTTP request it sends to AWS (moto) by
operation. moto serves only ~120 calls/s here, so time is not the figure: calls per event
are (target <= 0.1). Order is checked by the read model (each aggregate's events must
arrive as versions 1, 2, 3, ... or the handler raises and the event is dead-lettered)
and by comparing the rows with the store.

Prints a Markdown section and puts it into ``--out`` (default BENCHMARKS.md) between
``<!-- aws:start -->`` and ``<!-- aws:end -->``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import reventless as rv
from bench.blocks import put_block
from reventless.testing.app_suite import Add, Tally, ordered


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    binary = str(Path(sys.executable).parent / "moto_server")
    proc = subprocess.Popen(
        [binary, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=0.5):
                return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto_server did not start")


async def steady(
    endpoint: str, events: int, aggregates: int, rate: float, partitions: int
) -> dict[str, Any]:
    """Produce ``events`` commands at ``rate``/s; count API calls after a warm-up tenth."""
    url = f"sns+sqs://testing:testing@us-east-1?endpoint={endpoint}&prefix=bench&wait=5"
    opts = rv.AppOptions(
        partitions=partitions,
        collector=rv.CollectorOptions(poll_interval=3600.0, grace=3600.0),
    )
    with tempfile.TemporaryDirectory() as tmp:
        app = rv.App(f"sqlite:///{tmp}/bench.db?synchronous=NORMAL", url, options=opts)
        log = app.event_log(Tally)
        view = app.collect(ordered())
        async with app:
            broker: Any = app.broker
            warm = events // 10
            step = max(1, int(rate / 20))  # commands per 50 ms tick
            started = time.perf_counter()
            before: Counter[str] = Counter()
            sent = 0
            while sent < events:
                if sent >= warm and not before:
                    await app.settle(timeout=600)
                    before = Counter(broker.calls)
                    started = time.perf_counter()
                    counted_from = sent
                n = min(step, events - sent)
                await log.execute_many([(f"a-{(sent + i) % aggregates}", Add()) for i in range(n)])
                sent += n
                await asyncio.sleep(0.05)
            await app.settle(timeout=600)
            elapsed = time.perf_counter() - started
            spent = Counter(broker.calls)
            spent.subtract(before)
            rows = {r.id: r.events for r in await view.all()}
            letters = await app.dead_letters()
            head = await log.head()
            measured = events - counted_from
    calls = sum(v for v in spent.values() if v > 0)
    expect = {
        f"a-{i}": events // aggregates + (1 if i < events % aggregates else 0)
        for i in range(aggregates)
    }
    return {
        "events": events,
        "measured": measured,
        "aggregates": aggregates,
        "partitions": partitions,
        "rate": rate,
        "calls": calls,
        "per_event": calls / measured,
        "ops": {k: v for k, v in sorted(spent.items()) if v > 0},
        "in_order": rows == expect and not letters and head == events,
        "dead_letters": len(letters),
        "seconds": elapsed,
    }


def section(r: dict[str, Any], command: str) -> str:
    ops = ", ".join(f"{k} {v}" for k, v in r["ops"].items())
    ok = "held" if r["in_order"] else "BROKEN"
    target = "met" if r["per_event"] <= 0.1 else "NOT met"
    return (
        "## AWS SNS/SQS (moto)\n\n"
        f"`{command}` — a private moto server; App on SQLite with a read model that raises on "
        "any out-of-order event; collectors' store poll pushed out (every event travels "
        "SNS -> SQS). moto serves ~120 API calls/s, so calls per event is the figure, "
        "not time.\n\n"
        "| measure | value |\n|---|---|\n"
        f"| events (aggregates, partitions) | {r['events']:,} ({r['aggregates']}, "
        f"{r['partitions']}) |\n"
        f"| producer | {r['rate'] / 20:.0f} commands per 50 ms tick, "
        f"{r['measured'] / r['seconds']:.0f} events/s achieved |\n"
        f"| API calls after warm-up ({r['measured']:,} events) | {r['calls']} ({ops}) |\n"
        f"| **API calls per event** (target <= 0.1) | **{r['per_event']:.4f}** ({target}) |\n"
        f"| per-aggregate order over all events | {ok} (dead letters: {r['dead_letters']}) |\n"
        f"| wall time of the measured part | {r['seconds']:.1f} s |\n\n"
        "Why it is low: the relay sends what each group commit landed as one message per "
        "topic partition (an Arrow batch of many events), PublishBatch takes ten such "
        "messages, and each collector queue is drained with ReceiveMessage(10) + "
        "DeleteMessageBatch. Idle long polls (`wait`) add one call per queue per wait.\n"
    )


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.aws", description=__doc__)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--aggregates", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rate", type=float, default=1000.0, help="commands per second")
    p.add_argument("--quick", action="store_true", help="1,000 events")
    p.add_argument("--out", default="BENCHMARKS.md")
    a = p.parse_args(argv)
    events = 1000 if a.quick else a.events
    proc, endpoint = start_moto()
    try:
        r = await steady(endpoint, events, a.aggregates, a.rate, a.partitions)
    finally:
        proc.terminate()
        proc.wait(10)
    command = "python -m bench.aws" + (" --quick" if a.quick else "")
    text = section(r, command)
    print(text)
    put_block(Path(a.out), "aws", text)
    return 0 if r["in_order"] else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
