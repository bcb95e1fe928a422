"""``python -m bench.imports [--base REF] [--head REF] [--rounds N] [--out FILE]``: what a
new Python process pays to import the package (``import reventless`` and a use of
``reventless.App``, which imports all of it) and to print ``reventless --help``, for a git
ref (two side by side), with the package's modules compiled from source and from bytecode.

The suite starts some 370 Python processes that import the package (CLI runs, writer
processes, Spark's Python workers), and so does every user's CLI call and worker. Where
the environment sets ``PYTHONDONTWRITEBYTECODE`` (as this machine kind does) no process
writes the bytecode cache, so each compiles every module of the package again; ``make
test`` compiles them first.

Each ref's committed files are unpacked into a directory of their own (``bench.ab``).
For each round, in alternating order, every (ref, mode, what) runs ``python -X importtime
-c CODE`` in a fresh process (``WHATS``): ``source`` in a tree without ``__pycache__``
and with ``PYTHONDONTWRITEBYTECODE=1``; ``bytecode`` after ``compileall`` of the tree.
Reported: the median CPU time of the whole process (user + system, interpreter start-up
included, from ``getrusage`` of the children), the median sum of the import-time
report's own times (all modules), and the share of that of a few packages.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from .ab import ROOT, side_env, unpack
from .blocks import put_block

#: Top-level packages whose own import time is reported apart.
PARTS = ("reventless", "sqlalchemy", "pyarrow", "numpy", "pydantic", "sqlglot", "typer")

#: What each process runs: the whole package (its names are imported on first use since
#: the package's ``__init__`` became lazy), and the command line's help.
WHATS = {
    "package": "import reventless; reventless.App",
    "help": "from reventless.cli import main; main(['--help'])",
}


def import_once(tree: Path, bytecode: bool, what: str = "package") -> tuple[float, Counter[str]]:
    """One fresh process running ``WHATS[what]`` in ``tree``: its CPU seconds and the
    import-time report's own microseconds per top-level package."""
    env = side_env(tree)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", WHATS[what]],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    own: Counter[str] = Counter()
    for line in got.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line.split(":", 1)[1].split("|")
        own[name.strip().split(".")[0]] += int(self_us)
    return cpu, own


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.imports")
    ap.add_argument("--base", help="a git ref to measure beside --head (optional)")
    ap.add_argument("--head", default="HEAD", help="the other git ref (default HEAD)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, help="put the table into this file (BENCHMARKS.md)")
    a = ap.parse_args()
    names = [a.base, a.head] if a.base else [a.head]
    short: dict[str, str] = {}
    for r in names:
        got = subprocess.run(
            ["git", "rev-parse", "--short", "--verify", f"{r}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if got.returncode:
            raise SystemExit(f"python -m bench.imports: error: {r!r} is not a commit")
        short[r] = got.stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        # (committed files only: no bytecode cache until a round compiles one)
        refs = {ref: unpack(ref, Path(tmp), f"side{i}") for i, ref in enumerate(names)}
        sides = [(ref, m, w) for w in WHATS for ref in refs for m in ("source", "bytecode")]
        cpu: dict[tuple[str, str, str], list[float]] = {s: [] for s in sides}
        own: dict[tuple[str, str, str], list[Counter[str]]] = {s: [] for s in sides}
        for r in range(a.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for ref, mode, what in order:
                tree = refs[ref]
                if mode == "bytecode" and not (tree / "reventless" / "__pycache__").exists():
                    subprocess.run(
                        [sys.executable, "-m", "compileall", "-q", "reventless"],
                        cwd=tree,
                        check=True,
                        capture_output=True,
                    )
                if mode == "source":
                    for cache in tree.rglob("__pycache__"):
                        shutil.rmtree(cache)
                c, o = import_once(tree, mode == "bytecode", what)
                cpu[ref, mode, what].append(c)
                own[ref, mode, what].append(o)
                print(
                    f"round {r + 1}/{a.rounds}  {ref:>12} {mode:>8} {what:>7}  {c:.3f} s CPU",
                    flush=True,
                )
    lines = [
        "| process | ref | modules | process CPU (s) | import time, all modules (s) | "
        + " | ".join(PARTS)
        + " |",
        "|---|---|---|--:|--:|" + "--:|" * len(PARTS),
    ]
    for side in sides:
        ref, mode, what = side
        totals = [sum(o.values()) / 1e6 for o in own[side]]
        parts = [statistics.median(o[p] for o in own[side]) / 1e3 for p in PARTS]
        lines.append(
            f"| {what} | {ref} ({short[ref]}) | {mode} | {statistics.median(cpu[side]):.2f} | "
            f"{statistics.median(totals):.2f} | " + " | ".join(f"{p:,.0f} ms" for p in parts) + " |"
        )
    command = "python -m bench.imports" + (f" --base {a.base}" if a.base else "")
    command += f" --head {a.head}" if a.head != "HEAD" else ""
    command += f" --rounds {a.rounds}"
    body = "\n".join(
        [
            "## Importing the package (a new process)",
            "",
            f"Command: `{command}` (fresh processes of `python -X importtime -c CODE`; "
            f"`package`: `{WHATS['package']}`, `help`: `{WHATS['help']}`; "
            "the refs and modes alternating round by round, medians; "
            "`source`: no bytecode cache and `PYTHONDONTWRITEBYTECODE=1`, as each of the "
            "suite's processes ran before `make test` compiled the modules; `bytecode`: "
            "after `compileall`). The package columns: their modules' own import time.",
            "",
            *lines,
        ]
    )
    print(body)
    if a.out:
        put_block(a.out, "imports", body)


if __name__ == "__main__":
    main()
