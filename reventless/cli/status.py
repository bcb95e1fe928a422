"""``reventless status``: heads per topic, lag per collector and partition, open dead
letters; printed once, as JSON, or (``--watch``) as a live view redrawn every
``--interval`` seconds until Ctrl-C.

Example::

    reventless status --store sqlite:///shop.db
    reventless status --store sqlite:///shop.db --json
    reventless status --store sqlite:///shop.db --watch --interval 0.5
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from ..urls import redact_url
from .log import DEFAULT_STORE, Json, Store, open_admin, overview_json, stopped_by_signals
from .output import make_table, print_json, stdout
from .params import seconds
from .run import UsageError, run

if TYPE_CHECKING:
    from ..store import StoreAdmin, StoreOverview


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One read of the store: the overview and open dead letters per component."""

    at: datetime
    overview: StoreOverview
    dead_letters: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        """Stable keys: ``at``, ``topics``, ``collectors`` (with ``partitions``),
        ``dead_letters`` (open letters per component) and ``dead_letters_total``."""
        return {
            "at": self.at.isoformat(timespec="seconds"),
            **overview_json(self.overview),
            "dead_letters": self.dead_letters,
            "dead_letters_total": sum(self.dead_letters.values()),
        }


async def snapshot(admin: StoreAdmin) -> Snapshot:
    """Read the store once."""
    overview = await admin.overview()
    letters = await admin.collectors.dead_letters()
    counts = Counter(d.component for d in letters)
    return Snapshot(datetime.now(UTC), overview, dict(sorted(counts.items())))


def render(snap: Snapshot, store: str, interval: float | None = None) -> RenderableType:
    """The status view: a heading, topics, collector partitions, dead letters."""
    heading = Text.assemble(
        ("reventless status ", "bold"),
        redact_url(store),
        f"  at {snap.at:%H:%M:%S} UTC",
        "" if interval is None else f"  (every {interval:g}s, Ctrl-C to stop)",
    )
    o = snap.overview
    topics = make_table(
        "heads",
        ["topic", "kind", "partitions", "head"],
        [(t.name, t.kind, t.partitions, t.head) for t in o.topics],
    )
    lag_rows = [
        (c.component, c.topic, p.partition, p.checkpoint, p.head, p.lag,
         "resnapshot_required" if c.resnapshot_required else "ok")
        for c in o.collectors
        for p in (c.partitions or ())
    ]  # fmt: skip
    lags = make_table(
        f"lag (max {max((c.lag for c in o.collectors), default=0)})",
        ["collector", "topic", "partition", "checkpoint", "head", "lag", "state"],
        lag_rows,
    )
    total = sum(snap.dead_letters.values())
    letters = make_table(
        f"dead letters: {total}",
        ["component", "open"],
        list(snap.dead_letters.items()),
    )
    return Group(heading, topics, lags, letters)


def status(
    store: Store = DEFAULT_STORE,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="a live view, redrawn until Ctrl-C (exit 0)")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", parser=seconds, help="seconds between redraws")
    ] = 2.0,
    as_json: Json = False,
) -> None:
    """Heads per topic, lag per collector and partition, open dead letters."""
    run(_status(store, watch, interval, as_json))


async def _status(store: str, watch: bool, interval: float, as_json: bool) -> None:
    if watch and as_json:
        raise UsageError("--json does not go with --watch (a live view for a terminal)")
    async with open_admin(store) as admin:
        if watch:
            await _watch(admin, store, interval)
            return
        snap = await snapshot(admin)
    if as_json:
        print_json(snap.as_json())
    else:
        stdout().print(render(snap, store))


async def _watch(admin: StoreAdmin, store: str, interval: float) -> None:
    """Redraw every ``interval`` seconds until SIGINT or SIGTERM."""
    from rich.live import Live

    console = stdout()
    with stopped_by_signals(), contextlib.suppress(asyncio.CancelledError):
        if not console.is_terminal:  # a pipe or a file: one view after another
            while True:
                console.print(render(await snapshot(admin), store, interval))
                await asyncio.sleep(interval)
        with Live(console=console, auto_refresh=False) as live:
            while True:
                live.update(render(await snapshot(admin), store, interval), refresh=True)
                await asyncio.sleep(interval)
