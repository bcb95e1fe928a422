"""``python -m bench.ab --base REF [--head REF] [--rounds N] [--store sqlite|postgres|all]
[--quick] [--only KEY,...]``: reventless at a git ref beside the working tree (or beside
another ref, ``--head``), in one run.

Each round runs ``python -m bench --reps 1`` once in each tree, the order alternating from
round to round, so both sides see the same machine weather. A ref's tree is a ``git
archive`` of it in a temporary directory; each side imports its own ``reventless`` and
adapters (``PYTHONPATH``) and its own ``bench`` package, against this virtualenv's
third-party packages. The table shows per workload the median of reventless's rounds on
each side and their ratio (> 1: the working tree is faster), plus the raw driver's ratio
between the sides: the raw driver is the same code on both sides, so its ratio is the
noise floor of the run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: ``rep 1/1  sqlite   append_seq       reventless         3,375 cmd/s``
LINE = re.compile(r"^rep \d+/\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d,.]+)\s+(.+)$")

#: (store, workload, system) -> values, one per round
Samples = dict[tuple[str, str, str], list[float]]


def unpack(ref: str, into: Path, name: str) -> Path:
    """The tree of ``ref`` (committed files only) under ``into / name``."""
    tree = into / name
    tree.mkdir()
    archive = into / f"{name}.tar"
    subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(archive), ref], cwd=ROOT, check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def side_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [tree, tree / "adapters" / "nats", tree / "adapters" / "aws"]
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return env


def which_reventless(tree: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import reventless, reventless_nats; print(reventless.__file__)"],
        cwd=tree,
        env=side_env(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def run_side(
    tree: Path, label: str, args: list[str], samples: Samples, units: dict[str, str]
) -> None:
    cmd = [sys.executable, "-m", "bench", "--reps", "1", *args]
    proc = subprocess.Popen(
        cmd, cwd=tree, env=side_env(tree), stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = LINE.match(line.strip())
        if m is None:
            continue
        store, key, system, value, unit = m.groups()
        samples[(store, key, system)].append(float(value.replace(",", "")))
        units[key] = unit.strip()
        print(f"  {label:<5} {line.strip()}", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {tree} (exit {proc.returncode})")


def ratio(head: list[float], base: list[float]) -> str:
    if not head or not base or statistics.median(base) == 0:
        return "-"
    return f"{statistics.median(head) / statistics.median(base):.2f}x"


def spread(values: list[float]) -> str:
    """max/min over the rounds: this side's run-to-run noise."""
    if len(values) < 2 or min(values) <= 0:
        return "-"
    return f"{max(values) / min(values):.2f}"


def table(base: Samples, head: Samples, units: dict[str, str]) -> list[str]:
    lines = [
        "| store | workload | unit | base | head | head/base | base spread | head spread "
        "| raw head/base |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((s, k) for (s, k, system) in base if system == "reventless")
    for store, key in keys:
        b = base.get((store, key, "reventless"), [])
        h = head.get((store, key, "reventless"), [])
        raw = ratio(head.get((store, key, "raw"), []), base.get((store, key, "raw"), []))
        lines.append(
            f"| {store} | {key} | {units.get(key, '')} | {statistics.median(b):,.0f} "
            f"| {statistics.median(h) if h else 0:,.0f} | {ratio(h, b)} | {spread(b)} "
            f"| {spread(h)} | {raw} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    p.add_argument("--base", required=True, help="git ref to compare the working tree with")
    p.add_argument("--head", default=None, help="a git ref instead of the working tree")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--store", default="sqlite", choices=("sqlite", "postgres", "all"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--out", type=Path, help="also write the table (Markdown) here")
    args = p.parse_args(argv)
    bench_args = ["--store", args.store]
    if args.quick:
        bench_args.append("--quick")
    if args.only:
        bench_args += ["--only", args.only]

    base: Samples = defaultdict(list)
    head: Samples = defaultdict(list)
    units: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rvbench-ab-") as tmp:
        base_tree = unpack(args.base, Path(tmp), "base")
        head_tree = ROOT if args.head is None else unpack(args.head, Path(tmp), "head")
        print(f"base {args.base}: {which_reventless(base_tree)}")
        print(f"head {args.head or '(working tree)'}: {which_reventless(head_tree)}")
        for r in range(args.rounds):
            sides = [(base_tree, "base", base), (head_tree, "head", head)]
            if r % 2:
                sides.reverse()
            for tree, label, samples in sides:
                print(f"round {r + 1}/{args.rounds}: {label}")
                run_side(tree, label, bench_args, samples, units)
    command = f"python -m bench.ab --base {args.base}"
    if args.head:
        command += f" --head {args.head}"
    command += f" --rounds {args.rounds} --store {args.store}"
    if args.quick:
        command += " --quick"
    if args.only:
        command += f" --only {args.only}"
    lines = [f"`{command}`", "", *table(base, head, units)]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
