"""What the ``reventless`` command prints: rich tables on stdout, JSON for scripts
(``--json``), and progress on stderr.

Progress on a terminal is a rich bar with the count, the rate and the time left; when
stderr is not a terminal (a pipe, a log file, CI) it is a plain line at most once a
second and a last line when the work ends, so a log stays readable.

Example::

    table("topics", ["topic", "head"], [("Order", 12)])
    with meter("export Order", total=12, unit="rows") as m:
        m.advance(12)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

#: Seconds between two plain progress lines (stderr not a terminal).
PLAIN_EVERY = 1.0

#: Columns of a table written to a pipe or a file (no terminal width to fit; COLUMNS wins).
PIPE_WIDTH = 200


def stdout() -> Console:
    """A console on stdout; piped, tables keep their natural width up to ``PIPE_WIDTH``
    instead of folding cells at 80 columns."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def stderr() -> Console:
    """A console on stderr, for progress and notes."""
    return Console(stderr=True, highlight=False)


def make_table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A rich table; numbers right-aligned, ``None`` shown as an empty cell, text shown
    as it is (an error's ``[...]`` is not rich markup)."""
    numeric = [bool(rows) and all(_is_number(r[i]) for r in rows) for i in range(len(headers))]
    t = Table(title=title, title_justify="left", header_style="bold", expand=False)
    for header, right in zip(headers, numeric, strict=True):
        t.add_column(header, justify="right" if right else "left", overflow="fold")
    for row in rows:
        t.add_row(*(Text("" if c is None else str(c)) for c in row))
    return t


def table(title: str | None, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print a table on stdout (its title says when it is empty)."""
    stdout().print(make_table(title, headers, rows))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def print_json(value: Any) -> None:
    """``value`` as JSON on stdout: indented, keys in the order the command built them."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


class RateColumn(ProgressColumn):
    """``12,345 rows/s`` (the task's ``unit`` field), blank until rich has a rate."""

    def render(self, task: Task) -> RenderableType:
        speed = task.finished_speed or task.speed
        if speed is None and task.elapsed:  # one big step: rich has no samples to average
            speed = task.completed / task.elapsed
        unit = task.fields.get("unit", "")
        text = "" if speed is None else f"{rate(speed)} {unit}/s"
        return Text(text, style="progress.data.speed")


def rate(per_second: float) -> str:
    """``12,345`` or, below 10, ``2.5``: slow work (Spark tasks) still shows a rate."""
    return f"{per_second:,.0f}" if per_second >= 10 else f"{per_second:.1f}"


def bar() -> Progress:
    """A rich progress display on stderr: description, bar, M/N, rate, elapsed, ETA."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]}"),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=stderr(),
        transient=False,
    )


class Meter(Protocol):
    """Progress of one piece of work."""

    def advance(self, n: int) -> None:
        """``n`` more units done."""

    def update(self, *, completed: int | None = None, total: int | None = None) -> None:
        """Set the units done or the total (a total may grow as work is discovered)."""

    def describe(self, text: str) -> None:
        """What the work does now (a stage's name)."""


@contextlib.contextmanager
def meter(description: str, total: int | None, unit: str) -> Iterator[Meter]:
    """Report progress of ``total`` ``unit``s (None: unknown) on stderr. Its methods may be
    called from another thread (rich's display is locked)."""
    if stderr().is_terminal:
        with bar() as progress:
            yield RichMeter(progress, progress.add_task(description, total=total, unit=unit))
        return
    plain = PlainMeter(description, total, unit)
    yield plain
    plain.line(final=True)  # not after a failure: its one line is the error


class RichMeter:
    """A task of a rich ``Progress``."""

    def __init__(self, progress: Progress, task: TaskID) -> None:
        self.progress, self.task = progress, task

    def advance(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def update(self, *, completed: int | None = None, total: int | None = None) -> None:
        self.progress.update(self.task, completed=completed, total=total)

    def describe(self, text: str) -> None:
        self.progress.update(self.task, description=text)


class PlainMeter:
    """Progress as plain lines on stderr: ``export Order: 50,000/120,000 rows (41.7%)
    210,000 rows/s ETA 0:00:01``; a new description prints at once."""

    def __init__(self, description: str, total: int | None, unit: str) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.done = 0
        self.started = self.last = time.monotonic()
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if time.monotonic() - self.last >= PLAIN_EVERY:
                self.line(final=False)

    def update(self, *, completed: int | None = None, total: int | None = None) -> None:
        with self._lock:
            if completed is not None:
                self.done = completed
            if total is not None:
                self.total = total
            if time.monotonic() - self.last >= PLAIN_EVERY:
                self.line(final=False)

    def describe(self, text: str) -> None:
        with self._lock:
            self.description = text
            self.line(final=False)

    def line(self, *, final: bool) -> None:
        now = time.monotonic()
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        speed = self.done / elapsed
        text = f"{self.description}: {self.done:,}"
        if self.total is not None:
            text += f"/{self.total:,} {self.unit}"
            if self.total:
                text += f" ({100 * self.done / self.total:.1f}%)"
        else:
            text += f" {self.unit}"
        text += f" {rate(speed)} {self.unit}/s"
        if final:
            text += f" in {elapsed:.1f}s"
        elif self.total is not None and speed > 0:
            text += f" ETA {_clock(max(self.total - self.done, 0) / speed)}"
        print(text, file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
