"""JetStream fan-out: raw nats-py rates and reventless end to end, in one run.

``python -m bench.nats_fanout [--quick]`` starts a private ``nats-server -js`` on a free
loopback port and measures, interleaved over repetitions:

- raw nats-py: pipelined ``publish_async`` of 120-byte messages, and pull
  ``fetch(1000)`` + ack;
- reventless end to end (append -> relay -> JetStream -> collector -> SQLite read model
  with a durable checkpoint), with the collectors' store poll pushed out so every event
  travels through JetStream; the in-memory broker on the same workload for comparison;
- latency from ``execute`` to a side effect seeing the event, at a steady command rate.

Prints a Markdown section and puts it into ``--out`` (default BENCHMARKS.md) between
``<!-- nats:start -->`` and ``<!-- nats:end -->``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats

import reventless as rv
from bench.blocks import put_block
from bench.pgserver import PgServer
from bench.specs import VIEWS, Counter, Increment, Incremented, totals


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"nats://127.0.0.1:{port}"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("nats-server did not start")


async def raw_publish(url: str, n: int, tag: str) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=f"RAW_{tag}", subjects=[f"raw.{tag}.>"])
    body = b"x" * 120
    t0 = time.perf_counter()
    acks = [await js.publish_async(f"raw.{tag}.1", body) for _ in range(n)]
    await asyncio.gather(*acks)
    dt = time.perf_counter() - t0
    await nc.close()
    return n / dt


async def raw_fetch(url: str, n: int, tag: str) -> float:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe(f"raw.{tag}.>", durable=f"d_{tag}", stream=f"RAW_{tag}")
    got = 0
    t0 = time.perf_counter()
    while got < n:
        msgs = await sub.fetch(1000, timeout=5)
        await asyncio.gather(*(m.ack() for m in msgs))
        got += len(msgs)
    dt = time.perf_counter() - t0
    await nc.close()
    return n / dt


async def fan_out(broker: str, aggs: int, per: int) -> float:
    d = tempfile.mkdtemp()
    opts = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=600, grace=600))
    app = rv.App(store=f"sqlite:///{d}/fan.db", broker=broker, options=opts)
    log = app.event_log(Counter)
    view = app.collect(totals)
    events = [Incremented(by=1)] * per
    async with app:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(log.append(f"f-{i}", events, expected_version=0) for i in range(aggs))
        )
        await app.settle(timeout=300)
        dt = time.perf_counter() - t0
        assert sum(r.events for r in await view.all()) == aggs * per
    shutil.rmtree(d, ignore_errors=True)
    return aggs * per / dt


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _collect_until(store: str, broker: str, total: int, view: str) -> None:
    """The collector process of ``fan_out_split``: prints ``ready <cpu>``, then
    ``done <time> <cpu>`` (wall clock; its own CPU seconds)."""
    opts = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=600, grace=600))
    app = rv.App(store=store, broker=broker, options=opts)
    app.event_log(Counter)
    app.collect(VIEWS[view])
    async with app:
        print("ready", time.process_time(), flush=True)
        collector = app.collector(VIEWS[view].name)
        while collector.checkpoints.get(("Counter", 0), 0) < total:
            await asyncio.sleep(0.002)
        print("done", time.time(), time.process_time(), flush=True)


@dataclass
class Split:
    """One ``fan_out_split`` run: rates, and CPU microseconds per event per process."""

    end_to_end: float  # events/s from the first append to the read model having all
    append: float  # events/s of the appends alone
    after_commit: float  # events/s from the appends' return to the read model having all
    cpu_producer: float
    cpu_collector: float
    cpu_server: float


async def fan_out_split(
    broker: str, aggs: int, per: int, server_pid: int, view: str, store: str | None = None
) -> Split:
    """Like ``fan_out``, with the collector in its own process (a projector service)
    keeping read model ``VIEWS[view]``; ``store``: a fresh store URL (default: a new SQLite
    file)."""
    d = tempfile.mkdtemp()
    store = store or f"sqlite:///{d}/split.db"
    app = rv.App(store=store, broker=broker)
    log = app.event_log(Counter)
    events = [Incremented(by=1)] * per
    n = aggs * per
    async with app:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.nats_fanout",
            "--collect",
            store,
            broker,
            str(n),
            view,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        word, child_cpu0 = (await proc.stdout.readline()).split()
        assert word == b"ready"
        cpu0, server0 = time.process_time(), _cpu_of(server_pid)
        t0 = time.time()
        await asyncio.gather(
            *(log.append(f"s-{i}", events, expected_version=0) for i in range(aggs))
        )
        t1 = time.time()
        _, done, child_cpu1 = (await proc.stdout.readline()).split()
        cpu1, server1 = time.process_time(), _cpu_of(server_pid)
        await proc.wait()
    shutil.rmtree(d, ignore_errors=True)
    us = 1e6 / n
    return Split(
        end_to_end=n / (float(done) - t0),
        append=n / (t1 - t0),
        after_commit=n / (float(done) - t1),
        cpu_producer=(cpu1 - cpu0) * us,
        cpu_collector=(float(child_cpu1) - float(child_cpu0)) * us,
        cpu_server=(server1 - server0) * us,
    )


async def latency(broker: str, rate: int, seconds: float) -> tuple[float, float, float]:
    d = tempfile.mkdtemp()
    sent: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], float] = {}
    effect = rv.SideEffectHandler("latency_probe")

    @effect.on(Incremented)
    def _probe(ev: rv.Envelope[Incremented]) -> None:
        assert ev.aggregate_id is not None and ev.version is not None
        seen[(ev.aggregate_id, ev.version)] = time.perf_counter()

    opts = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=600, grace=600))
    app = rv.App(store=f"sqlite:///{d}/lat.db", broker=broker, options=opts)
    log = app.event_log(Counter)
    app.collect(effect)
    n = int(rate * seconds)
    async with app:
        start = time.perf_counter()
        tasks = []
        for i in range(n):
            due = start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            agg = f"l-{i % 50}"

            async def one(agg: str = agg) -> None:
                t = time.perf_counter()
                res = await log.execute(agg, Increment(by=1))
                sent[(agg, res.version)] = t

            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        await app.settle(timeout=120)
    shutil.rmtree(d, ignore_errors=True)
    lat = sorted((seen[k] - t) * 1000 for k, t in sent.items() if k in seen)
    achieved = n / (max(sent.values()) - start) if sent else 0.0
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1], achieved


#: The split runs: (row label, read model, store).
SPLITS = [
    ("reventless fan-out, collector in its own process, `handler` view", "handler", "sqlite"),
    ("reventless fan-out, collector in its own process, `fold` view", "fold", "sqlite"),
    ("... the same on PostgreSQL, `handler` view", "handler", "postgres"),
    ("... the same on PostgreSQL, `fold` view", "fold", "postgres"),
]


def _med(xs: Any) -> str:
    return f"{statistics.median(list(xs)):.1f}"


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}-{max(xs):,.0f})"


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nats_fanout")
    p.add_argument("--quick", action="store_true")
    # internal: store broker n view
    p.add_argument("--collect", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--postgres", action="store_true", help="also run the split on PostgreSQL")
    p.add_argument(
        "--out",
        default="BENCHMARKS.md",
        help="Markdown file to update (the section between the nats markers)",
    )
    a = p.parse_args(argv)
    if a.collect:
        await _collect_until(a.collect[0], a.collect[1], int(a.collect[2]), a.collect[3])
        return 0
    reps = a.reps or (1 if a.quick else 3)
    n_raw = 5_000 if a.quick else 100_000
    aggs, per = (10, 500) if a.quick else (100, 1000)
    s_aggs = aggs if a.quick else 300  # split runs: long enough that start-up is amortised
    seconds = 1.0 if a.quick else 10.0
    work = Path(tempfile.mkdtemp())
    proc, url = start_server(work)
    results: dict[str, list[float]] = {}
    lat50: list[float] = []
    lat99: list[float] = []
    achieved: list[float] = []
    splits: dict[str, list[Split]] = {}
    pg = PgServer() if a.postgres else None
    try:
        if pg is not None:
            pg.__enter__()
        for r in range(reps):
            tag = f"r{r}"
            results.setdefault("raw publish_async", []).append(await raw_publish(url, n_raw, tag))
            results.setdefault("raw fetch(1000)+ack", []).append(await raw_fetch(url, n_raw, tag))
            results.setdefault("reventless fan-out, JetStream, one process", []).append(
                await fan_out(f"{url}?prefix=f{r}", aggs, per)
            )
            results.setdefault("reventless fan-out, in-memory broker, one process", []).append(
                await fan_out("memory://", aggs, per)
            )
            for label, view, db in SPLITS:
                if db == "postgres" and pg is None:
                    continue
                store = pg.new_db(f"fan{r}").url if pg is not None and db == "postgres" else None
                split = await fan_out_split(
                    f"{url}?prefix=s{r}{view}{db}", s_aggs, per, proc.pid, view, store
                )
                splits.setdefault(label, []).append(split)
                results.setdefault(label, []).append(split.end_to_end)
            p50, p99, ach = await latency(f"{url}?prefix=l{r}", 1000, seconds)
            lat50.append(p50)
            lat99.append(p99)
            achieved.append(ach)
            print(
                f"rep {r + 1}/{reps}: "
                + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in results.items())
            )
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        if pg is not None:
            pg.__exit__(None, None, None)
    raw = statistics.median(results["raw publish_async"])
    rows = [f"| {k} | {_fmt(v)} | {statistics.median(v) / raw:.2f}x |" for k, v in results.items()]
    cpu = [
        f"| {label} | {_med(x.cpu_producer for x in xs)} | {_med(x.cpu_collector for x in xs)} "
        f"| {_med(x.cpu_server for x in xs)} | {_fmt([x.append for x in xs])} "
        f"| {_fmt([x.after_commit for x in xs])} |"
        for label, xs in splits.items()
    ]
    lines = [
        "## JetStream fan-out (`python -m bench.nats_fanout --postgres`)",
        "",
        f"Private nats-server 2.9 (`-js`, file storage) on loopback; {reps} repetitions, "
        "median (min-max); the last column is each rate over raw nats-py `publish_async` "
        "in the same run. Fan-out: concurrent appends of "
        f"{per} events each ({aggs} appends in one process, {s_aggs} when the collector runs "
        "in its own process, as a projector service would), from the first append until "
        "the read model (durable checkpoint in the same transaction) has them all; the "
        "collectors' store poll is disabled, so every event travels through the broker. "
        "Store: a SQLite file (WAL, synchronous=FULL) unless the row says PostgreSQL "
        "(`--postgres`). Read models: `handler` is a hand-written handler (a pydantic row "
        "per event); `fold` is the same view declared with `rv.ColumnUpserts`, which the "
        "collector folds from the stored rows without building events. Raw rows: "
        f"120-byte messages, {n_raw:,} per run.",
        "",
        "| workload | events or msgs/s | vs raw publish |",
        "|---|---|---|",
        *rows,
        "",
        "CPU microseconds per event in the split runs (median; user + system time of each "
        "process over the run), the appends' own rate, and the rate from the last append's "
        f"commit to the read model. {os.cpu_count()} cores are shared by the three "
        "processes (and PostgreSQL's).",
        "",
        "| split run | producer (append + relay) | collector | nats-server | appends | "
        "after the appends |",
        "|---|---|---|---|---|---|",
        *cpu,
        "",
        f"Latency, `execute` -> side effect sees the event, JetStream, steady 1,000 "
        f"commands/s for {seconds:.0f} s (achieved {_fmt(achieved)} commands/s): "
        f"p50 {statistics.median(lat50):.1f} ms, p99 {statistics.median(lat99):.1f} ms "
        f"(p99 range {min(lat99):.1f}-{max(lat99):.1f} ms).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    put_block(Path(a.out), "nats", text)
    return 0


def run(argv: list[str] | None = None) -> Any:
    return asyncio.run(main(argv))


if __name__ == "__main__":
    raise SystemExit(run())
