"""The marked sections bench scripts write into BENCHMARKS.md (``<!-- name:start -->`` ...
``<!-- name:end -->``): each script replaces its own and keeps the rest of the file."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of section ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def put_block(out: Path, name: str, body: str) -> None:
    """Replace section ``name`` of ``out`` with ``body`` (or append it), keeping the rest."""
    start, end = markers(name)
    block = f"{start}\n{body.strip(chr(10))}\n{end}\n"
    old = out.read_text() if out.exists() else ""
    if start in old and end in old:
        head, rest = old.split(start, 1)
        new = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + block if old else block
    out.write_text(new)


def rows_main(
    name: str,
    title: str,
    unit: str,
    run: Callable[[int], Awaitable[list[tuple[str, float]]]],
    note: str = "",
) -> None:
    """``python -m bench.<name> [--rows N] [--out FILE]``: run ``run(rows)``, print its
    ``(measure, rate)`` rows as a table and put it into ``--out`` as section ``name``."""
    ap = argparse.ArgumentParser(prog=f"python -m bench.{name}")
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    results = asyncio.run(run(a.rows))
    command = f"Command: `python -m bench.{name} --rows {a.rows}`."
    lines = ["", f"## {title}", "", f"{command} {note}".rstrip(), "", f"| measure | {unit} |"]
    lines += ["|---|---|", *(f"| {k} | {v:,.0f} |" for k, v in results)]
    block = "\n".join(lines)
    print(block)
    if a.out:
        put_block(Path(a.out), name, block)
