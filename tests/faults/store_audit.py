"""Read a store back on a fresh connection after a fault and check what it holds.

The App under test may hold connections the fault left in any state, so the audit never
goes through it: it opens its own connection (psycopg or sqlite3) and reads a log, a read
model and a checkpoint as they are on disk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One stored event of a test log; ``by`` is one of its fields (``Counter``'s ``by``,
    or the one ``logged`` was asked for)."""

    offset: int
    aggregate_id: str
    version: int
    type: str
    correlation_id: str | None
    by: int | None


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run ``sql`` on a fresh connection of the store at ``url``."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        conn = sqlite3.connect(str(parsed.database), timeout=30)
        try:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
        finally:
            conn.close()
    import psycopg

    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def logged(url: str, table: str, value: str = "by") -> list[LoggedEvent]:
    """A log's events in offset order, with field ``value`` of each."""
    rows = query(
        url,
        f'SELECT _offset, _aggregate_id, _version, _type, _correlation_id, "{value}" '
        f"FROM {table} ORDER BY _offset",
    )
    return [LoggedEvent(*r) for r in rows]


def check_gapless(events: Sequence[LoggedEvent]) -> None:
    """Offsets are 1..N and each aggregate's versions 1..n: nothing lost, nothing twice."""
    assert [e.offset for e in events] == list(range(1, len(events) + 1))
    versions: dict[str, list[int]] = {}
    for e in events:
        versions.setdefault(e.aggregate_id, []).append(e.version)
    for agg, vs in versions.items():
        assert vs == list(range(1, len(vs) + 1)), f"versions of {agg}: {vs}"


def by_command(events: Iterable[LoggedEvent]) -> dict[str, list[LoggedEvent]]:
    """Events grouped by correlation id (the tests give each command its own)."""
    out: dict[str, list[LoggedEvent]] = {}
    for e in events:
        if e.correlation_id is not None:
            out.setdefault(e.correlation_id, []).append(e)
    return out


def check_whole(events: Sequence[LoggedEvent], expected: int) -> None:
    """One command's events: all ``expected`` of them, at consecutive offsets."""
    assert len(events) == expected, events
    first = events[0].offset
    assert [e.offset for e in events] == list(range(first, first + expected)), events


def fold_totals(events: Iterable[LoggedEvent]) -> dict[str, tuple[int, int]]:
    """What ``tests.model.totals`` must hold: per aggregate (value, events)."""
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        value, n = out.get(e.aggregate_id, (0, 0))
        value = 0 if e.type == "Reset" else value + (e.by or 0)
        out[e.aggregate_id] = (value, n + 1)
    return out


def totals_rows(url: str) -> dict[str, tuple[int, int]]:
    """The ``counter_totals`` read model as stored."""
    return {i: (v, n) for i, v, n in query(url, "SELECT id, value, events FROM rm_counter_totals")}


def checkpoint(url: str, component: str, topic: str) -> int:
    """The stored checkpoint of ``component`` on partition 0 of ``topic`` (0: none)."""
    rows = query(
        url,
        'SELECT "offset" FROM rv_checkpoints '
        f"WHERE component = '{component}' AND topic = '{topic}' AND partition = 0",
    )
    return int(rows[0][0]) if rows else 0
