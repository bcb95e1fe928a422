"""A SQLite store registers ``sqlite3`` adapters for None and bool (``_BIND_AS_IS``): they
skip the adapter protocol's failing lookups, and must bind exactly what was bound before:
NULL for None, the integer 0 or 1 for a bool. Its INSERTs leave out the metadata columns
that are NULL in every row of the statement (``Appender._lean``). Read back from the file
with plain ``sqlite3``, the types and values SQLite stored are those."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.codec.columns import META_NAMES
from reventless.store import Database, append, database


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

    key: tuple[type[Any], type[Any]] = (bool, sqlite3.PrepareProtocol)
    none: tuple[type[Any], type[Any]] = (type(None), sqlite3.PrepareProtocol)
    monkeypatch.setitem(sqlite3.adapters, key, mine)
    monkeypatch.delitem(sqlite3.adapters, none, raising=False)
    database._fast_sqlite_binding()
    assert sqlite3.adapters[key] is mine
    assert none in sqlite3.adapters
    con = sqlite3.connect(":memory:")
    try:
        assert con.execute("SELECT ?, ?", (True, None)).fetchone() == ("yes", None)
    finally:
        con.close()


def _stored(path: Path, table: str) -> list[tuple[object, ...]]:
    con = sqlite3.connect(path)
    try:
        return con.execute(
            f"SELECT _offset, _aggregate_id, _version, _correlation_id, _causation_id, _user, "
            f'_service, _ip, _tenant, "on", note FROM {table} ORDER BY _offset'
        ).fetchall()
    finally:
        con.close()


async def test_rows_with_and_without_metadata_in_one_statement(tmp_path: Path) -> None:
    """A group commit of commands with different metadata (one INSERT of rows where a
    column is NULL in some rows only) and bulk appends: each row keeps its own values,
    offsets are gapless, and every None is NULL."""
    path = tmp_path / "mixed.db"
    app = rv.App(store=f"sqlite:///{path}", broker="memory://")
    log = app.event_log(Switch)
    metas = [
        None,
        rv.Metadata(user="ann", tenant="t1"),
        rv.Metadata(causation_id="c-1", ip="10.0.0.1"),
        rv.Metadata(correlation_id="k-1", service="svc"),
    ]
    async with app:
        await asyncio.gather(
            *(
                log.execute(f"g-{i}", Flag(on=i % 2 == 0, note=None if i % 3 else "n"), meta=m)
                for i, m in enumerate(metas * 8)
            )
        )
        await log.append_many([(f"b-{i}", [Flagged(on=True)], 0) for i in range(3)])
        await log.append_many(
            [(f"u-{i}", [Flagged(on=False, note="z")], 0) for i in range(2)],
            meta=rv.Metadata(user="bob"),
        )
        table = app.store._entry(log.name).info.table  # type: ignore[attr-defined]
    rows = _stored(path, table)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    by_id = {r[1]: r for r in rows}
    assert len(by_id) == 32 + 3 + 2
    for i, m in enumerate(metas * 8):
        _, _, version, corr, cause, user, service, ip, tenant, on, note = by_id[f"g-{i}"]
        want = m or rv.Metadata()
        assert version == 1
        assert (cause, user, ip, tenant) == (want.causation_id, want.user, want.ip, want.tenant)
        assert corr == (want.correlation_id or corr) and corr is not None
        assert service == (want.service or service) and service is not None
        assert (on, note) == (int(i % 2 == 0), None if i % 3 else "n")
    for i in range(3):
        _, _, _, _, cause, user, _, ip, tenant, on, note = by_id[f"b-{i}"]
        assert (cause, user, ip, tenant, on, note) == (None, None, None, None, 1, None)
    for i in range(2):
        _, _, _, _, cause, user, _, ip, tenant, on, note = by_id[f"u-{i}"]
        assert (cause, user, ip, tenant, on, note) == (None, "bob", None, None, 0, "z")


def test_the_appenders_built_statements_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each set of NULL columns is a statement of its own (and one per row count): past
    ``_STATEMENTS`` the appender starts over rather than keeping every one."""
    monkeypatch.setattr(append, "_STATEMENTS", 8)
    info = append.TableInfo(table="t", columns=(*META_NAMES, "x"), pg_types=(), insert_sql="")
    appender = append.Appender(Database("sqlite://"), lambda _topic: info)
    full = tuple(range(len(META_NAMES) + 1))
    shapes: set[str] = set()
    for mask in range(2 ** len(append._OFTEN_NULL)):
        row: list[int | None] = list(full)
        for bit, at in enumerate(append._OFTEN_NULL):
            if mask >> bit & 1:
                row[at] = None
        sql, _ = appender._lean(info, [tuple(row)], True)
        appender._values(sql, 2)
        shapes.add(sql)
        assert len(appender._leaner) <= 8 and len(appender._many) <= 8
    assert len(shapes) == 2 ** len(append._OFTEN_NULL)
