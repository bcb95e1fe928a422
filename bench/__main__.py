"""``python -m bench [--store sqlite|postgres|all] [--quick] [--reps N] [--only KEY,...]
[--out BENCHMARKS.md]``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import extra, pg, plots
from .pgserver import PgServer
from .report import (
    PgInfo,
    Results,
    console_table,
    fmt,
    kept_blocks,
    machine,
    markdown,
    previous_analysis,
)
from .workloads import STORES, SYSTEMS, Sizes, Workload, build, durability, probe_projection_runner

#: A measurement that takes longer than this aborts the run (its databases are dropped).
TIMEOUT_S = 600


def _timeout(*_: object) -> None:
    raise TimeoutError(f"a measurement took longer than {TIMEOUT_S} s (hung?)")


def plan(store: str, quick: bool) -> list[Workload]:
    if store == "postgres":
        sizes = Sizes.postgres(quick)
        return pg.build(sizes) + extra.build(sizes, store)
    sizes = Sizes.quick() if quick else Sizes()
    return build(sizes) + extra.build(sizes, store)


def latency_and_plots(out: Path, plot_dir: Path | None, results: dict[str, Results]) -> list[str]:
    """The latency lines and the plots section (plots are drawn now, beside ``out``)."""
    lines = ["## Command -> read model latency", ""]
    for store, runs in extra.LATENCIES.items():
        p50 = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        lines.append(
            f"- {store}: p50 {p50:.1f} ms, p99 {p99:.1f} ms (median over {len(runs)} runs; "
            f"p99 range {min(r[1] for r in runs):.1f}-{max(r[1] for r in runs):.1f} ms): "
            "row `latency`, in-memory broker, from `execute` to the read model's commit."
        )
    if not extra.LATENCIES:
        lines = []
    else:
        lines.append("")
    base = out.resolve().parent
    plot_dir = (plot_dir or base / "bench" / "plots").resolve()
    made = [
        plots.throughput_vs_batch(results, plot_dir / "throughput_vs_batch.png"),
        plots.rebuild_vs_events(
            base / "bench" / "results" / "spark.json", plot_dir / "rebuild_vs_events.png"
        ),
    ]
    shown = [m for m in made if m is not None]
    if shown:
        lines += ["## Plots", ""]
        for m in shown:
            rel = os.path.relpath(m, base)
            lines += [f"![{m.stem.replace('_', ' ')}]({rel})", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--store",
        choices=(*STORES, "all"),
        default="sqlite",
        help="where to run: a SQLite file (default), PostgreSQL (PGHOST/PGPORT/PGUSER, "
        "default 127.0.0.1:5432 user postgres; a fresh database per measurement), or both",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test, < 1 min)")
    parser.add_argument(
        "--reps", type=int, default=None, help="repetitions (default 5, --quick: 3; minimum 1)"
    )
    parser.add_argument("--only", default="", help="comma-separated workload keys")
    parser.add_argument("--out", type=Path, help="write a Markdown report here")
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        help="directory for the PNG plots (default: bench/plots beside --out)",
    )
    args = parser.parse_args(argv)
    default_reps = 3 if args.quick else 5
    if args.reps is None:
        args.reps = default_reps
    if args.reps < 1:
        parser.error("--reps must be >= 1")

    stores = list(STORES) if args.store == "all" else [args.store]
    plans = {store: plan(store, args.quick) for store in stores}
    if args.only:
        keys = {k.strip() for k in args.only.split(",") if k.strip()}
        known = {w.key for ws in plans.values() for w in ws}
        unknown = keys - known
        if unknown:
            parser.error(f"unknown workload(s) {sorted(unknown)}; known: {sorted(known)}")
        plans = {store: [w for w in ws if w.key in keys] for store, ws in plans.items()}

    results: dict[str, Results] = {
        store: {w.key: {s: [] for s in SYSTEMS} for w in ws} for store, ws in plans.items()
    }
    machine_info = machine()  # before measuring: records the code revision being measured
    pragmas: dict[str, tuple[str, str]] = {}
    runner_probe = ""
    pg_info: PgInfo | None = None
    started = time.perf_counter()
    # SIGTERM (e.g. `timeout`) unwinds like Ctrl-C, so this run's databases are dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGALRM, _timeout)
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rvbench-")))
        server = stack.enter_context(PgServer()) if "postgres" in plans else None
        if "sqlite" in plans:
            (root / "probe").mkdir()
            pragmas = durability(root / "probe")
            (root / "runner").mkdir()
            runner_probe = probe_projection_runner(root / "runner")
            print("sqlite durability (journal_mode, synchronous):", pragmas, flush=True)
        if server is not None:
            pg_info = PgInfo(
                server=f"{server.host}:{server.port}",
                settings=server.settings(),
                sessions=pg.durability(server.new_db),
            )
            print("postgres server settings:", pg_info.settings, flush=True)
            print(f"postgres session settings {pg.SESSION_SETTINGS}:", pg_info.sessions)
            print(f"postgres databases: rvbench_{server.run_id}_*", flush=True)
        for rep in range(args.reps):
            order = SYSTEMS[rep % len(SYSTEMS) :] + SYSTEMS[: rep % len(SYSTEMS)]
            for store, workloads in plans.items():
                for w in workloads:
                    for system in order:
                        fn = w.run.get(system)
                        if fn is None:
                            continue
                        # Files and databases are removed only at the end: deleting them
                        # mid-run makes the filesystem discard blocks while the next
                        # contender is being timed.
                        where: object
                        if server is not None and store == "postgres":
                            where = server.new_db(f"{w.key}_{system[:3]}")
                            server.checkpoint()  # no one pays for an earlier run's writes
                        else:
                            where = Path(tempfile.mkdtemp(dir=root))
                        gc.collect()
                        signal.alarm(TIMEOUT_S)
                        try:
                            value = fn(where)
                        finally:
                            signal.alarm(0)
                        results[store][w.key][system].append(value)
                        print(
                            f"rep {rep + 1}/{args.reps}  {store:<8} {w.key:<16} {system:<13} "
                            f"{fmt(value):>10} {w.unit}",
                            flush=True,
                        )
        if server is not None:
            print(f"dropping {len(server.created)} databases", flush=True)

    for store, workloads in plans.items():
        if workloads:
            print(f"\n{store}:")
            print(console_table(workloads, results[store], store))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.out is not None:
        command = "python -m bench"
        if args.store != "sqlite":
            command += f" --store {args.store}"
        if args.quick:
            command += " --quick"
        if args.reps != default_reps:
            command += f" --reps {args.reps}"
        if args.only:
            command += f" --only {args.only}"
        command += f" --out {args.out.name}"
        text = markdown(
            plans=plans,
            results=results,
            reps=args.reps,
            quick=args.quick,
            command=command,
            durability=pragmas,
            runner_probe=runner_probe,
            pg_info=pg_info,
            previous=previous_analysis(args.out),
            machine_info=machine_info,
            kept=kept_blocks(args.out),
            extra_sections=latency_and_plots(args.out, args.plots, results),
        )
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
