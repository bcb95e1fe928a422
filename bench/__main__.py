"""``python -m bench [--quick] [--reps N] [--only KEY,...] [--out BENCHMARKS.md]``."""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

from .report import Results, console_table, fmt, machine, markdown, previous_analysis
from .workloads import SYSTEMS, Sizes, build, durability, probe_projection_runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test, < 1 min)")
    parser.add_argument(
        "--reps", type=int, default=None, help="repetitions (default 5, --quick: 3; minimum 1)"
    )
    parser.add_argument("--only", default="", help="comma-separated workload keys")
    parser.add_argument("--out", type=Path, help="write a Markdown report here")
    args = parser.parse_args(argv)
    default_reps = 3 if args.quick else 5
    if args.reps is None:
        args.reps = default_reps
    if args.reps < 1:
        parser.error("--reps must be >= 1")

    workloads = build(Sizes.quick() if args.quick else Sizes())
    if args.only:
        keys = {k.strip() for k in args.only.split(",") if k.strip()}
        unknown = keys - {w.key for w in workloads}
        if unknown:
            parser.error(
                f"unknown workload(s) {sorted(unknown)}; known: {[w.key for w in workloads]}"
            )
        workloads = [w for w in workloads if w.key in keys]

    results: Results = {w.key: {s: [] for s in SYSTEMS} for w in workloads}
    machine_info = machine()  # before measuring: records the code revision being measured
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rvbench-") as tmp:
        root = Path(tmp)
        (root / "probe").mkdir()
        pragmas = durability(root / "probe")
        (root / "runner").mkdir()
        runner_probe = probe_projection_runner(root / "runner")
        print("durability (journal_mode, synchronous):", pragmas, flush=True)
        for rep in range(args.reps):
            order = SYSTEMS[rep % len(SYSTEMS) :] + SYSTEMS[: rep % len(SYSTEMS)]
            for w in workloads:
                for system in order:
                    fn = w.run.get(system)
                    if fn is None:
                        continue
                    # Files are removed only at the end: deleting them mid-run makes the
                    # filesystem discard blocks while the next contender is being timed.
                    work = Path(tempfile.mkdtemp(dir=root))
                    gc.collect()
                    value = fn(work)
                    results[w.key][system].append(value)
                    print(
                        f"rep {rep + 1}/{args.reps}  {w.key:<16} {system:<13} "
                        f"{fmt(value):>10} {w.unit}",
                        flush=True,
                    )

    print()
    print(console_table(workloads, results))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    if args.out is not None:
        command = "python -m bench" + (" --quick" if args.quick else "")
        if args.reps != default_reps:
            command += f" --reps {args.reps}"
        if args.only:
            command += f" --only {args.only}"
        command += f" --out {args.out.name}"
        text = markdown(
            workloads=workloads,
            results=results,
            reps=args.reps,
            quick=args.quick,
            command=command,
            durability=pragmas,
            runner_probe=runner_probe,
            previous=previous_analysis(args.out),
            machine_info=machine_info,
        )
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
