"""The HTTP/SSE gateway: live delivery latency and backlog streaming, SQLite file (WAL,
``synchronous=FULL``). ``python -m bench.gateway [--quick] [--out BENCHMARKS.md] [--base REF]
[--rounds N]``

The gateway runs in its own process (uvicorn on a loopback port, ``create_app`` with the
default ``GatewayOptions``); the bench process commits events through an ``App`` and reads
the SSE stream with httpx, as a client in another process would.

- *Latency*: a stream is open on a subscription from the head; the bench commits one event
  at a steady rate and times each from the ``publish`` call (so the commit's fsync is
  included) to the arrival of its frame at the client.
- *Backlog*: ``--events`` events are committed first; a fresh gateway then streams them all
  to one client from offset 1 (events/s from the request to the last frame; the client
  counts frames and checks the last ``id``). The gateway's peak RSS (``VmHWM``) is read
  from ``/proc`` at the end.

With ``--base REF`` the same measurements also run on reventless at the git ref REF (a
``git archive``, as ``bench.ab`` does: each side imports its own package), alternating
sides round by round; the table shows the median of the rounds per side.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-operator-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MARK = b"\nevent: event\n"  # one per event frame
SCHEMA = pa.schema(
    [
        pa.field("k", pa.string()),
        pa.field("qty", pa.int64()),
        pa.field("total", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("name", pa.string()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)


def rows(start: int, n: int) -> pa.Table:
    """``n`` orders from number ``start`` on."""
    idx = range(start, start + n)
    return pa.table(
        {
            "k": [f"order-{i % 1000}" for i in idx],
            "qty": list(idx),
            "total": [i * 1.25 for i in idx],
            "flag": [i % 2 == 0 for i in idx],
            "name": [f"customer {i % 97}" for i in idx],
            "at": [1_700_000_000_000_000 + i * 1000 for i in idx],
        },
        schema=SCHEMA,
    )


# -- the gateway process -------------------------------------------------------------------


def serve(url: str) -> None:
    """Run the gateway for ``url`` on a free loopback port; print ``PORT <n>``."""
    import uvicorn

    from reventless.gateway import create_app

    app = create_app(url, tokens={TOKEN: None})
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.run(sockets=[sock])


@contextlib.asynccontextmanager
async def gateway(url: str) -> AsyncIterator[tuple[str, int]]:
    """A gateway process for ``url`` (this side's tree); yields its base URL and pid."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.gateway", "--serve", url, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the gateway did not start: {line!r}")
        base = f"http://127.0.0.1:{int(line.split()[1])}"
        import httpx

        async with httpx.AsyncClient(base_url=base) as http:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/health")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield base, proc.pid
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def peak_rss_mb(pid: int) -> float:
    """Peak resident set size of process ``pid`` (``VmHWM``), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def subscribe(http: Any, start: int | str) -> str:
    r = await http.post("/subscriptions", json={"topic": "orders", "from": start}, headers=AUTH)
    r.raise_for_status()
    sub_id: str = r.json()["id"]
    return sub_id


# -- measurements (one side) ---------------------------------------------------------------


async def latency(url: str, rate: float, seconds: float) -> dict[str, float]:
    """p50/p99 ms from ``publish`` to the frame at the client, one event per commit."""
    import httpx

    import reventless as rv

    app = rv.App(store=url)
    topic = app.topic("orders", schema=SCHEMA, key="k")
    arrived: dict[int, float] = {}
    async with app, gateway(url) as (base, _), httpx.AsyncClient(base_url=base) as http:
        await topic.publish(rows(0, 10))
        sub = await subscribe(http, "latest")

        async def read() -> None:
            path = f"/subscriptions/{sub}/stream"
            async with http.stream("GET", path, headers=AUTH, timeout=None) as r:
                buf = b""
                async for chunk in r.aiter_bytes():
                    now = time.perf_counter()
                    buf += chunk
                    *frames, buf = buf.split(b"\n\n")
                    for f in frames:
                        if f.startswith(b"id: "):
                            arrived[int(f[4 : f.index(b"\n")])] = now

        reader = asyncio.create_task(read())
        await asyncio.sleep(min(1.0, seconds / 5))  # the stream is open and idle
        sent: dict[int, float] = {}
        commit: list[float] = []
        n, gap, t_next = int(rate * seconds), 1.0 / rate, time.perf_counter()
        for i in range(n):
            t_next += gap
            t0 = time.perf_counter()
            res = await topic.publish(rows(100 + i, 1))
            commit.append(time.perf_counter() - t0)
            sent[res.last_offset] = t0
            await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
        deadline = time.perf_counter() + 10
        while len([o for o in sent if o in arrived]) < n and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    ms = sorted((arrived[o] - t) * 1000 for o, t in sent.items() if o in arrived)
    if len(ms) < n:
        raise RuntimeError(f"only {len(ms)} of {n} events arrived")
    return {
        "lat_p50": statistics.median(ms),
        "lat_p99": ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))],
        "commit_p50": statistics.median(commit) * 1000,
    }


async def backlog(url: str, events: int) -> dict[str, float]:
    """events/s of one SSE client reading ``events`` committed events from offset 1."""
    import httpx

    import reventless as rv

    app = rv.App(store=url)
    topic = app.topic("orders", schema=SCHEMA, key="k")
    async with app:
        for i in range(0, events, 20_000):
            await topic.publish(rows(i, min(20_000, events - i)))
    async with gateway(url) as (base, pid), httpx.AsyncClient(base_url=base) as http:
        sub = await subscribe(http, 1)
        rss0 = peak_rss_mb(pid)
        t0, n, last = time.perf_counter(), 0, b""
        async with http.stream(
            "GET", f"/subscriptions/{sub}/stream", headers=AUTH, timeout=None
        ) as r:
            async for chunk in r.aiter_bytes():
                # a frame's marker may straddle two chunks: count it in the joined bytes
                joined = last[-(len(MARK) - 1) :] + chunk
                n += joined.count(MARK)
                last = (last + chunk)[-4096:]
                if n >= events:
                    break
        dt = time.perf_counter() - t0
        tail = last[last.rindex(b"id: ") + 4 :]
        if n != events or int(tail[: tail.index(b"\n")]) != events:
            raise RuntimeError(f"read {n} events, expected {events}")
        return {"backlog_eps": events / dt, "rss_before": rss0, "rss_peak": peak_rss_mb(pid)}


async def side(quick: bool, events: int, postgres: bool) -> dict[str, float]:
    seconds = 1.0 if quick else 15.0
    with tempfile.TemporaryDirectory() as tmp:
        out = await latency(f"sqlite:///{tmp}/lat.db?synchronous=FULL", 20.0, seconds)
        out |= await backlog(f"sqlite:///{tmp}/backlog.db?synchronous=FULL", events)
    if postgres:
        from bench.pgserver import PgServer

        with PgServer() as pg:
            got = await latency(pg.new_db("gwlat").url, 20.0, seconds)
        out |= {f"pg_{k}": v for k, v in got.items()}
    return out


# -- the two sides and the report ----------------------------------------------------------


def run_side(tree: Path, args: list[str]) -> dict[str, float]:
    from bench.ab import side_env

    env = side_env(tree) if tree != ROOT else dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-m", "bench.gateway", "--side", *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"the bench failed in {tree}:\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, float] = json.loads(line[7:])
            return result
    raise RuntimeError(f"no result from {tree}: {out.stdout}\n{out.stderr}")


ROWS = [
    ("lat_p50", "live latency p50, ms (publish -> frame at the client)", "{:.1f}"),
    ("lat_p99", "live latency p99, ms", "{:.1f}"),
    ("commit_p50", "publish (commit) p50, ms: part of the latency", "{:.1f}"),
    ("backlog_eps", "backlog streaming, events/s (one SSE client)", "{:,.0f}"),
    ("rss_peak", "gateway peak RSS during the backlog run, MB", "{:.0f}"),
    ("rss_before", "gateway RSS before the backlog run, MB", "{:.0f}"),
    ("pg_lat_p50", "PostgreSQL: live latency p50, ms", "{:.1f}"),
    ("pg_lat_p99", "PostgreSQL: live latency p99, ms", "{:.1f}"),
    ("pg_commit_p50", "PostgreSQL: publish (commit) p50, ms", "{:.1f}"),
]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gateway")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int, default=None, help="backlog size")
    ap.add_argument("--base", default=None, help="a git ref to measure beside this tree")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--postgres", action="store_true", help="latency on PostgreSQL too")
    ap.add_argument("--note", default="", help="a sentence for the report")
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return
    events = a.events or (10_000 if a.quick else 200_000)
    if a.side:
        result = asyncio.run(side(a.quick, events, a.postgres))
        print("RESULT " + json.dumps(result), flush=True)
        return
    rounds = a.rounds or (1 if a.quick else 2)
    args = ["--events", str(events), *(["--quick"] if a.quick else [])]
    args += ["--postgres"] if a.postgres else []
    samples: dict[str, list[dict[str, float]]] = {"this tree": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this tree": ROOT}
        if a.base:
            from bench.ab import unpack

            base = unpack(a.base, Path(tmp), "base")
            shutil.copy(Path(__file__), base / "bench" / "gateway.py")  # the same bench
            trees = {f"base {a.base}": base, "this tree": ROOT}
            samples = {name: [] for name in trees}
        for r in range(rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for name, tree in order:
                print(f"round {r + 1}/{rounds}: {name}", flush=True)
                if a.quick and tree == ROOT:  # the smoke run: the side runs in this process
                    samples[name].append(asyncio.run(side(a.quick, events, a.postgres)))
                else:
                    samples[name].append(run_side(tree, args))
    cmd = "python -m bench.gateway" + (" --quick" if a.quick else "")
    cmd += f" --events {events}" if a.events else ""
    cmd += " --postgres" if a.postgres else ""
    cmd += f" --base {a.base}" if a.base else ""
    names = list(samples)
    lines = [
        "",
        "## HTTP/SSE gateway (SQLite file, WAL, synchronous=FULL)",
        "",
        f"Command: `{cmd}` (median of {rounds} round(s) per side). The gateway is its own "
        "process (uvicorn, default `GatewayOptions`); one httpx client reads the SSE stream. "
        "Latency: 20 commits/s of one event each, timed from the `publish` call to the "
        "frame at the client (PostgreSQL rows: the same on a local PostgreSQL server). "
        f"Backlog: {events:,} events (6 fields) streamed from offset 1."
        + (f" {a.note}" if a.note else ""),
        "",
        "| measure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label, fmt in ROWS:
        if not all(key in s for n in names for s in samples[n]):
            continue
        cells = [fmt.format(statistics.median(s[key] for s in samples[n])) for n in names]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    block = "\n".join(lines)
    print(block)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "gateway", block)


if __name__ == "__main__":
    main()
