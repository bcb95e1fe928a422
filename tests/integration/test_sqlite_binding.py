"""A SQLite store registers ``sqlite3`` adapters for None and bool (``_BIND_AS_IS``): they
skip the adapter protocol's failing lookups, and must bind exactly what was bound before:
NULL for None, the integer 0 or 1 for a bool. Read back from the file with plain
``sqlite3``, the types and values SQLite stored are those."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import reventless as rv
from reventless.store import database


class Flagged(rv.Event):
    on: bool
    note: str | None = None


class Flag(rv.Command):
    on: bool
    note: str | None = None


class Switch(rv.Aggregate):
    events = Flagged
    on: bool = False
    note: str | None = None

    @rv.handles(Flag)
    def flag(self, cmd: Flag) -> Flagged:
        return Flagged(on=cmd.on, note=cmd.note)

    @rv.applies(Flagged)
    def _flagged(self, e: Flagged) -> None:
        self.on, self.note = e.on, e.note


async def test_none_and_bool_bind_as_null_and_integers(tmp_path: Path) -> None:
    path = tmp_path / "bind.db"
    app = rv.App(store=f"sqlite:///{path}", broker="memory://")
    log = app.event_log(Switch)
    async with app:
        await log.execute("s-1", Flag(on=True))
        await log.execute("s-1", Flag(on=False, note="x"))
        await log.execute_many([("s-2", Flag(on=True)), ("s-3", Flag(on=False))])
        await log.append_many([("s-4", [Flagged(on=True)], 0)])
        assert (await log.load("s-1")).note == "x"
        table = app.store._entry(log.name).info.table  # type: ignore[attr-defined]
    for kind in (type(None), bool):
        assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters
    con = sqlite3.connect(path)
    try:
        got = con.execute(
            f'SELECT _aggregate_id, "on", typeof("on"), note, typeof(note), '
            f"typeof(_causation_id), typeof(_tenant) FROM {table} ORDER BY _offset"
        ).fetchall()
    finally:
        con.close()
    assert got == [
        ("s-1", 1, "integer", None, "null", "null", "null"),
        ("s-1", 0, "integer", "x", "text", "null", "null"),
        ("s-2", 1, "integer", None, "null", "null", "null"),
        ("s-3", 0, "integer", None, "null", "null", "null"),
        ("s-4", 1, "integer", None, "null", "null", "null"),
    ]


def test_an_adapter_registered_before_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    def mine(value: bool) -> str:
        return "yes" if value else "no"

    key = (bool, sqlite3.PrepareProtocol)
    monkeypatch.setitem(sqlite3.adapters, key, mine)
    monkeypatch.delitem(sqlite3.adapters, (type(None), sqlite3.PrepareProtocol), raising=False)
    database._fast_sqlite_binding()
    assert sqlite3.adapters[key] is mine
    assert (type(None), sqlite3.PrepareProtocol) in sqlite3.adapters
    con = sqlite3.connect(":memory:")
    try:
        assert con.execute("SELECT ?, ?", (True, None)).fetchone() == ("yes", None)
    finally:
        con.close()
