"""Scheduled commands: firing throughput and lateness with 100,000 pending schedules.
``python -m bench.schedules [--quick] [--postgres] [--pending N] [--out BENCHMARKS.md]``

Per store (a SQLite file, WAL, ``synchronous=FULL``; with ``--postgres`` also a local
PostgreSQL server), each schedule rings its own aggregate (``Ring`` -> one ``Rang`` event
carrying the due time), so every firing is a command with a deterministic command id, a
load, a decision and an append:

- *Writing*: commands/s of ``execute_many`` when each command also schedules one command
  (stored in the append's transaction), beside the same commands scheduling nothing.
- *Burst*: ``--pending`` schedules, all due at once; a scheduler process (the App's, with
  default ``SchedulerOptions``) fires them. Firings/s from the due time to the last
  landed command, and its peak RSS (``VmHWM``).
- *Steady*: ``--pending`` schedules, of which a slice comes due at a steady rate (below
  the burst rate) while the rest wait far in the future; lateness p50/p99 = when the
  command landed (its event's ``_produced_at``) minus when it was due.

The scheduler runs in its own process, as in production; lateness and counts are read
back from the store. On PostgreSQL the bench runs ``ANALYZE rv_schedules`` after loading
the schedules, as autovacuum would shortly after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import reventless as rv
from reventless.ids import now_us
from reventless.scheduling import ScheduledCommand
from reventless.store import require_sql

ROOT = Path(__file__).resolve().parent.parent
CHUNK = 5000


class Rang(rv.Event):
    due_us: int


class Ring(rv.Command):
    due_us: int


class Arm(rv.Command):
    """Rings later (an hour), scheduled in the command's own append."""


class Armed(rv.Event):
    pass


class Alarm(rv.Aggregate):
    events = Rang | Armed

    @rv.handles(Ring)
    def ring(self, cmd: Ring) -> Rang:
        return Rang(due_us=cmd.due_us)

    @rv.handles(Arm)
    def arm(self, cmd: Arm) -> list[rv.Event | rv.Schedule]:
        later = rv.Schedule(Alarm, self.id, Ring(due_us=0), after=timedelta(hours=1))
        return [Armed(), later]

    @rv.applies(Rang)
    def _rang(self, e: Rang) -> None:
        pass

    @rv.applies(Armed)
    def _armed(self, e: Armed) -> None:
        pass


def quiet_app(url: str) -> tuple[rv.App, rv.EventLog[Alarm]]:
    """An App that fires nothing (the bench process writes and reads)."""
    off = rv.AppOptions(scheduler=rv.SchedulerOptions(enabled=False))
    app = rv.App(store=url, options=off)
    return app, app.event_log(Alarm)


async def plant(url: str, dues: list[int], far: int) -> None:
    """Schedules ``b-i`` ringing ``a-i`` at ``dues[i]``, then ``far`` more an hour away."""
    app, _ = quiet_app(url)
    hour = now_us() + 3_600_000_000
    total = len(dues) + far
    async with app:
        for start in range(0, total, CHUNK):
            batch = []
            for i in range(start, min(total, start + CHUNK)):
                due = dues[i] if i < len(dues) else hour
                cmd = Ring(due_us=due).model_dump_json()
                batch.append(ScheduledCommand(f"b-{i}", "Alarm", f"a-{i}", "Ring", cmd, due, "{}"))
            await app.store.schedules.write(batch)
        if app.store.dialect == "postgresql":
            # what autovacuum does within a minute of such a load: with the statistics of
            # an empty table the planner scans every pending row per claim (~15-20 ms)
            db = require_sql(app.store, "the bench").db
            await db.write(lambda conn: conn.exec_driver_sql("ANALYZE rv_schedules"))


def fire(url: str, expected: int) -> dict[str, float]:
    """Run a scheduler process on ``url`` until ``expected`` commands landed."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.schedules", "--fire", url, "--expected", str(expected)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if out.returncode:
        raise RuntimeError(f"the scheduler process failed:\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, float] = json.loads(line[7:])
            return result
    raise RuntimeError(f"no result: {out.stdout}\n{out.stderr}")


async def scheduler_process(url: str, expected: int) -> None:
    """The ``--fire`` side: the App's scheduler until ``expected`` events landed."""
    app = rv.App(store=url)
    alarms = app.event_log(Alarm)
    async with app:
        while await alarms.head() < expected:
            await asyncio.sleep(0.05)
        fired = app.scheduler.fired
    print("RESULT " + json.dumps({"fired": fired, "rss_peak": peak_rss_mb()}), flush=True)


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def landed(url: str) -> list[tuple[int, int]]:
    """(produced at, due) of every ``Rang``."""
    app, alarms = quiet_app(url)
    out: list[tuple[int, int]] = []
    async with app:
        async for batch in alarms.read_batches():
            produced = batch.column("_produced_at").cast("int64").to_pylist()
            types = batch.column("_type").to_pylist()
            dues = batch.column("due_us").to_pylist()
            out += [(p, d) for p, t, d in zip(produced, types, dues, strict=True) if t == "Rang"]
    return out


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


async def writing(url: str, commands: int, rounds: int = 3) -> dict[str, float]:
    """Commands/s with and without one schedule each (execute_many, distinct aggregates),
    alternating, the median of ``rounds`` each (a shared machine is noisy)."""
    app, alarms = quiet_app(url)
    rates: dict[str, list[float]] = {"write_plain": [], "write_sched": []}
    makers: dict[str, Callable[[], rv.Command]] = {
        "write_plain": lambda: Ring(due_us=0),
        "write_sched": Arm,
    }
    async with app:
        for r in range(rounds):
            for key, make in makers.items():
                t = time.perf_counter()
                await alarms.execute_many((f"w-{key}-{r}-{i}", make()) for i in range(commands))
                rates[key].append(commands / (time.perf_counter() - t))
        assert len(await app.scheduler.pending(limit=10**7)) == commands * rounds
    return {k: statistics.median(v) for k, v in rates.items()}


async def burst(url: str, pending: int, lead: float = 3.0) -> dict[str, float]:
    due = now_us() + int(lead * 1e6)  # the scheduler process has started by then
    await plant(url, [due] * pending, 0)
    result = fire(url, pending)
    got = await landed(url)
    assert len(got) == pending and result["fired"] == pending, (len(got), result)
    assert all(p >= d for p, d in got), "a schedule fired early"
    first, last = min(p for p, _ in got), max(p for p, _ in got)
    return {"burst_rate": pending / ((last - first) / 1e6), "burst_rss": result["rss_peak"]}


async def steady(
    url: str, pending: int, due_count: int, rate: float, lead: float = 4.0
) -> dict[str, float]:
    start = now_us() + int(lead * 1e6)
    step = 1e6 / rate
    await plant(url, [start + int(i * step) for i in range(due_count)], pending - due_count)
    result = fire(url, due_count)
    got = await landed(url)
    assert len(got) == due_count == result["fired"], (len(got), result)
    late = [(p - d) / 1000 for p, d in got]
    assert min(late) >= 0, "a schedule fired early"
    return {
        "steady_p50": pct(late, 0.5),
        "steady_p99": pct(late, 0.99),
        "steady_max": max(late),
        "steady_rss": result["rss_peak"],
    }


async def measure(new_url: Callable[[str], str], pending: int, quick: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    out |= await writing(new_url("write"), 1_000 if quick else 10_000)
    # quick: the scheduler process gets less of a head start (its lateness still counts)
    out |= await burst(new_url("burst"), pending, 1.0 if quick else 3.0)
    due_count, rate = (200, 200.0) if quick else (10_000, 500.0)
    out |= await steady(new_url("steady"), pending, due_count, rate, 1.5 if quick else 4.0)
    out["steady_rate"] = rate
    out["steady_due"] = due_count
    return out


ROWS = [
    ("write_plain", "commands/s, no schedule (execute_many, 1 event each; median of 3)", "{:,.0f}"),
    ("write_sched", "commands/s, each also scheduling a command (same append)", "{:,.0f}"),
    ("burst_rate", "burst: firings/s, all pending due at once (first to last landed)", "{:,.0f}"),
    ("burst_rss", "burst: scheduler process peak RSS, MB", "{:.0f}"),
    ("steady_p50", "steady: lateness p50, ms (landed minus due)", "{:.1f}"),
    ("steady_p99", "steady: lateness p99, ms", "{:.1f}"),
    ("steady_max", "steady: lateness max, ms", "{:.1f}"),
    ("steady_rss", "steady: scheduler process peak RSS, MB", "{:.0f}"),
]


def report(results: dict[str, dict[str, float]], pending: int, cmd: str) -> str:
    names = list(results)
    first = results[names[0]]
    lines = [
        "",
        "## Scheduled commands",
        "",
        f"Command: `{cmd}`. {pending:,} pending schedules per store; each firing runs a "
        "command (deterministic command id, load, decide, append of one event) on its own "
        "aggregate. The scheduler is a separate process with default `SchedulerOptions` "
        "(batches of 500). Burst: all schedules due at once. Steady: "
        f"{first['steady_due']:,.0f} of them due at {first['steady_rate']:,.0f}/s, the "
        "rest an hour away. Lateness is read from the store: the event's `_produced_at` "
        "minus the due time (none fired early). PostgreSQL: `ANALYZE rv_schedules` after "
        "loading (as autovacuum does shortly after a bulk load).",
        "",
        "| measure | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label, fmt in ROWS:
        if all(key in results[n] for n in names):
            lines.append(
                f"| {label} | " + " | ".join(fmt.format(results[n][key]) for n in names) + " |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.schedules")
    ap.add_argument("--quick", action="store_true", help="2,000 pending, shorter runs")
    ap.add_argument("--pending", type=int, default=None, help="default 100,000")
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL too")
    ap.add_argument("--out", default=None, help="a markdown file to put the section into")
    ap.add_argument("--fire", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--expected", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fire:
        asyncio.run(scheduler_process(a.fire, a.expected))
        return
    pending = a.pending or (2_000 if a.quick else 100_000)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite file ...", flush=True)
        results["SQLite file (FULL)"] = asyncio.run(
            measure(lambda n: f"sqlite:///{tmp}/{n}.db?synchronous=FULL", pending, a.quick)
        )
    if a.postgres:
        from bench.pgserver import PgServer

        print("PostgreSQL ...", flush=True)
        with PgServer() as pg:
            results["PostgreSQL"] = asyncio.run(
                measure(lambda n: pg.new_db(f"sched_{n}").url, pending, a.quick)
            )
    cmd = "python -m bench.schedules" + (" --quick" if a.quick else "")
    cmd += f" --pending {a.pending}" if a.pending else ""
    cmd += " --postgres" if a.postgres else ""
    block = report(results, pending, cmd)
    print(block)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "schedules", block)


if __name__ == "__main__":
    main()
