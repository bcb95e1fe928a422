"""What OpenTelemetry costs reventless, and a plot of lag and throughput from its metrics.
``python -m bench.telemetry [--quick] [--out BENCHMARKS.md] [--plot]``

Side by side in one run (modes interleaved round by round, medians, ratios to *off*):

- *off*: no provider (what a process without the otel extra, or without an SDK, runs);
- *no-op*: the API's ``NoOpTracerProvider`` / ``NoOpMeterProvider`` passed explicitly,
  so every hook runs through the OpenTelemetry API and records nothing;
- *metrics*: the SDK's ``MeterProvider`` (no reader) and no tracing: what metrics alone
  cost, the floor of the SDK modes below;
- *SDK*: the SDK's ``TracerProvider`` (every span recorded) and ``MeterProvider`` with no
  processor and no reader (spans and measurements are made, then dropped);
- *SDK 1%*: as *SDK*, with the sampler ``ParentBased(TraceIdRatioBased(0.01))`` and a
  ``BatchSpanProcessor`` whose exporter drops what it is given (one trace in a hundred
  is recorded; the others only carry their context on);
- *SDK sampled off*: as *SDK 1%* with the ``ALWAYS_OFF`` sampler (no span recorded);
- *SDK + batch*: ``BatchSpanProcessor`` writing every span as JSON to a file, and a
  ``PeriodicExportingMetricReader`` writing the metrics to a file each second.

Workloads (SQLite file, ``synchronous=FULL``, the in-memory broker, as BENCHMARKS.md rows
1, 2 and 8): sequential commands on one aggregate (one event per transaction), 64
concurrent command streams (group commit), and a read model catching up on a preloaded
log whose aggregates were each appended in a span of their own (every batch continues
one trace and links the others).

``--plot`` runs a demo (a steady producer, a burst, the read model paused for a while)
with metrics on, samples ``reventless.events.appended``, ``reventless.collector.events``
and ``reventless.collector.lag`` every 100 ms and draws ``bench/plots/lag_throughput.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    InMemoryMetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler, TraceIdRatioBased

import reventless as rv
from reventless import telemetry

from .specs import Counter, Increment, Incremented, totals

MODES = ("off", "no-op", "metrics", "SDK", "SDK 1%", "SDK sampled off", "SDK + batch")
SAMPLERS: dict[str, Sampler] = {
    "SDK 1%": ParentBased(TraceIdRatioBased(0.01)),
    "SDK sampled off": ALWAYS_OFF,
}
PLOT = Path(__file__).parent / "plots" / "lag_throughput.png"
perf = time.perf_counter
cpu = time.process_time  # the whole process: the exporter's thread counts too
Timing = tuple[int, float, float]  # operations, wall seconds, CPU seconds


def app_at(where: Path) -> rv.App:
    return rv.App(
        store=f"sqlite:///{where / 'rv.db'}?synchronous=FULL",
        broker="memory://",
        options=rv.AppOptions(log=rv.LogOptions(snapshot_every=0)),
    )


class Dropped(SpanExporter):
    """An exporter that drops the spans it is given (the cost of sending them aside)."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class Mode:
    """Providers for one mode; ``close`` flushes and shuts the SDK's down."""

    def __init__(self, name: str, sink: TextIO) -> None:
        self.name, self.closers = name, []
        tp: Any = None
        mp: Any = None
        if name == "no-op":
            tp, mp = trace_api.NoOpTracerProvider(), metrics_api.NoOpMeterProvider()
        elif name == "metrics":
            mp = MeterProvider()
        elif name == "SDK":
            tp, mp = TracerProvider(), MeterProvider()
        elif name in SAMPLERS:
            tp, mp = TracerProvider(sampler=SAMPLERS[name]), MeterProvider()
            tp.add_span_processor(BatchSpanProcessor(Dropped()))
        elif name == "SDK + batch":
            tp = TracerProvider()
            exporter = ConsoleSpanExporter(
                out=sink, formatter=lambda s: s.to_json(indent=None) + "\n"
            )
            tp.add_span_processor(BatchSpanProcessor(exporter))
            reader = PeriodicExportingMetricReader(
                ConsoleMetricExporter(out=sink), export_interval_millis=1000
            )
            mp = MeterProvider(metric_readers=[reader])
        self.closers += [p.shutdown for p in (tp, mp) if hasattr(p, "shutdown")]
        telemetry.configure(tracer_provider=tp, meter_provider=mp)

    def close(self) -> None:
        for close in self.closers:
            close()
        telemetry.configure(tracer_provider=None, meter_provider=None)


async def seq_commands(where: Path, n: int) -> Timing:
    app = app_at(where)
    log = app.event_log(Counter)
    async with app:
        await log.execute("seq", Increment(by=1))
        t0, c0 = perf(), cpu()
        for _ in range(n):
            await log.execute("seq", Increment(by=1))
        return n, perf() - t0, cpu() - c0


async def concurrent_commands(where: Path, per: int, workers: int = 64) -> Timing:
    app = app_at(where)
    log = app.event_log(Counter)

    async def worker(i: int) -> None:
        for _ in range(per):
            await log.execute(f"conc-{i}", Increment(by=1))

    async with app:
        await asyncio.gather(*(log.execute(f"conc-{i}", Increment(by=1)) for i in range(workers)))
        t0, c0 = perf(), cpu()
        await asyncio.gather(*(worker(i) for i in range(workers)))
        return workers * per, perf() - t0, cpu() - c0


async def catch_up(where: Path, aggs: int, per: int) -> Timing:
    pre = app_at(where)
    log = pre.event_log(Counter)
    events = [Incremented(by=1) for _ in range(per)]

    async def one(i: int) -> None:
        with telemetry.span("preload"):  # each aggregate's events: a trace of their own
            await log.append(f"cu-{i}", events, expected_version=0)

    async with pre:
        for start in range(0, aggs, 100):
            await asyncio.gather(*(one(i) for i in range(start, min(aggs, start + 100))))
    app = app_at(where)
    app.event_log(Counter)
    view = app.collect(totals)
    t0, c0 = perf(), cpu()
    await app.start()
    try:
        await app.settle()
        dt, dc = perf() - t0, cpu() - c0
        rows = await view.all()
        assert sum(r.events for r in rows) == aggs * per, "catch-up missed events"
    finally:
        await app.stop()
    return aggs * per, dt, dc


def measure(quick: bool) -> dict[str, dict[str, list[Timing]]]:
    """Rates per workload and mode, modes interleaved (rotated) round by round."""
    rounds = 3 if quick else 5
    seq_n, conc_per, cu_aggs = (300, 10, 50) if quick else (2000, 60, 300)
    work: dict[str, Callable[[Path], Coroutine[Any, Any, Timing]]] = {
        "commands/s, sequential": lambda p: seq_commands(p, seq_n),
        "commands/s, 64 concurrent": lambda p: concurrent_commands(p, conc_per),
        "catch-up events/s": lambda p: catch_up(p, cu_aggs, 100),
    }
    out: dict[str, dict[str, list[Timing]]] = {w: {m: [] for m in MODES} for w in work}
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "export.jsonl", "w") as sink:
        for r in range(rounds):
            for k in range(len(MODES)):
                mode = MODES[(r + k) % len(MODES)]
                for name, fn in work.items():
                    where = Path(tempfile.mkdtemp(dir=tmp))
                    m = Mode(mode, sink)
                    try:
                        out[name][mode].append(asyncio.run(fn(where)))
                    finally:
                        m.close()
            print(f"round {r + 1}/{rounds} done", flush=True)
        size = os.path.getsize(Path(tmp) / "export.jsonl")
    print(f"exported {size / 1e6:.1f} MB of spans and metrics in SDK + batch", flush=True)
    return out


def report(timings: dict[str, dict[str, list[Timing]]], cmd: str) -> str:
    lines = [
        "### Telemetry cost",
        "",
        f"`{cmd}` (one run, modes interleaved round by round). Each cell: the median rate "
        "(wall clock), the process's median CPU time per operation, and in brackets the "
        "rate relative to *off* by CPU time (the machine is shared, so CPU time is the "
        "steadier measure of what telemetry adds):",
        "",
        "| workload | " + " | ".join(MODES) + " |",
        "|---|" + "---|" * len(MODES),
    ]
    for name, by_mode in timings.items():
        off_cpu = statistics.median(c / n for n, _, c in by_mode["off"])
        cells = []
        for m in MODES:
            rate = statistics.median(n / w for n, w, _ in by_mode[m])
            per = statistics.median(c / n for n, _, c in by_mode[m])
            ratio = "" if m == "off" else f" ({off_cpu / per:.2f}x)"
            cells.append(f"{rate:,.0f}/s, {per * 1e6:,.1f} us{ratio}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "*off*: no provider; *no-op*: the API's no-op providers (reventless sees they record "
        "nothing and treats them as off); *metrics*: the SDK's metrics alone; *SDK*: every "
        "span recorded, spans and measurements made and dropped; *SDK 1%*: the sampler "
        "`ParentBased(TraceIdRatioBased(0.01))`, the recorded spans to a `BatchSpanProcessor` "
        "that drops them, metrics as in *SDK*; *SDK sampled off*: the same with `ALWAYS_OFF` "
        "(the W3C context is still stored and sent); *SDK + batch*: spans exported as JSON "
        "to a file by `BatchSpanProcessor`, metrics to a file each second.",
    ]
    return "\n".join(lines)


# -- the demo plot --------------------------------------------------------------------------


def _total(reader: InMemoryMetricReader, name: str) -> float:
    data = reader.get_metrics_data()
    total = 0.0
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    total += sum(getattr(p, "value", 0) for p in m.data.data_points)
    return total


Samples = list[tuple[float, float, float, float]]


async def demo(where: Path, quick: bool) -> tuple[Samples, dict[str, tuple[float, float]]]:
    """(seconds, appended total, handled total, lag) samples of a demo run, and its phases
    (name -> start, end seconds)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=None, meter_provider=provider)
    app = app_at(where)
    log = app.event_log(Counter)
    app.collect(totals)
    scale = 0.5 if quick else 1.0
    samples: Samples = []
    phases: dict[str, tuple[float, float]] = {}
    async with app:
        t0 = perf()
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                samples.append(
                    (
                        perf() - t0,
                        _total(reader, "reventless.events.appended"),
                        _total(reader, "reventless.collector.events"),
                        _total(reader, "reventless.collector.lag"),
                    )
                )
                await asyncio.sleep(0.1)

        async def produce(seconds: float, per_second: int) -> None:
            end = perf() + seconds * scale
            i = 0
            while perf() < end:
                tick = perf()
                batch = [(f"d-{i + j}", Increment(by=1)) for j in range(per_second // 10)]
                i += len(batch)
                await log.execute_many(batch)
                await asyncio.sleep(max(0.0, 0.1 - (perf() - tick)))

        sampler = asyncio.create_task(sample())
        await produce(2, 1000)  # steady
        start = perf() - t0
        await produce(2, 6000)  # a burst
        phases["burst"] = (start, perf() - t0)
        app.collector("counter_totals").pause()  # the read model stops (a deploy, say)
        start = perf() - t0
        await produce(1.5, 1000)
        phases["read model paused"] = (start, perf() - t0)
        app.collector("counter_totals").resume()
        await produce(2.5, 1000)
        await app.settle()
        await asyncio.sleep(0.3)
        done.set()
        await sampler
    telemetry.configure(tracer_provider=None, meter_provider=None)
    provider.shutdown()
    return samples, phases


def plot(samples: Samples, phases: dict[str, tuple[float, float]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [s[0] for s in samples]

    def rate(i: int, window: int = 4) -> list[float]:
        """Per second over the last ``window`` samples (the producer ticks each 100 ms)."""
        out = []
        for k, b in enumerate(samples):
            a = samples[max(0, k - window)]
            out.append((b[i] - a[i]) / (b[0] - a[0]) if b[0] > a[0] else 0.0)
        return out

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True)
    top.plot(ts, rate(1), label="appended (events/s)")
    top.plot(ts, rate(2), label="handled by the read model (events/s)")
    top.set_ylabel("events/s")
    top.legend(loc="upper right")
    top.set_title("A demo run, from reventless's OpenTelemetry metrics")
    bottom.plot(ts, [s[3] for s in samples], color="tab:red", label="collector lag (events)")
    bottom.set_ylabel("lag (events)")
    bottom.set_xlabel("seconds")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        for (name, (a, b)), color in zip(phases.items(), ("tab:blue", "tab:gray"), strict=False):
            ax.axvspan(a, b, color=color, alpha=0.12, label=name if ax is bottom else None)
    bottom.legend(loc="upper right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.telemetry")
    ap.add_argument("--quick", action="store_true", help="short rounds, fewer events")
    ap.add_argument("--out", default=None, help="a markdown file to put the section into")
    ap.add_argument("--plot", action="store_true", help=f"run the demo and draw {PLOT}")
    ap.add_argument("--no-cost", action="store_true", help="skip the cost measurement")
    a = ap.parse_args()
    if not a.no_cost:
        cmd = "python -m bench.telemetry" + (" --quick" if a.quick else "")
        block = report(measure(a.quick), cmd)
        print(block)
        if a.out:
            from bench.blocks import put_block

            put_block(Path(a.out), "telemetry", block)
    if a.plot:
        with tempfile.TemporaryDirectory() as tmp:
            samples, phases = asyncio.run(demo(Path(tmp), a.quick))
        print(f"wrote {plot(samples, phases, PLOT)} ({len(samples)} samples)")


if __name__ == "__main__":
    main()
