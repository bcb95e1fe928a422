"""Dead letters: events a component gave up on, parked per aggregate until redriven."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..deadletter import DeadLetter as DeadLetter  # re-exported: moved to reventless.deadletter
from ..deadletter import RedriveReport as RedriveReport
from ..decode import envelope_of
from ..errors import Rejected
from ..spec import Envelope
from ..store.database import Database

if TYPE_CHECKING:
    from .runtime import Collector


def record_sync(
    db: Database, conn: Connection, component: str, failed: list[tuple[Envelope[Any], str, int]]
) -> None:
    """Insert dead letters (a replayed batch does not duplicate them)."""
    if not failed:
        return
    now = time.time_ns() // 1000
    q = db.q
    cols = (
        "component, topic, "
        + q("offset")
        + ", aggregate_id, msg_id, event_type, error, attempts, created_at"
    )
    sql = (
        f"INSERT INTO rv_dead_letters ({cols}) VALUES ({db.placeholders(9)}) "
        f"ON CONFLICT (component, topic, {q('offset')}) DO NOTHING"
    )
    conn.exec_driver_sql(
        sql,
        [
            (
                component,
                ev.topic,
                ev.offset,
                ev.aggregate_id,
                ev.msg_id,
                ev.type,
                err[:4000],
                n,
                now,
            )
            for ev, err, n in failed
        ],
    )


def list_sync(db: Database, conn: Connection, component: str | None) -> list[DeadLetter]:
    """Open dead letters, per aggregate in offset order."""
    q = db.q
    sql = (
        f"SELECT id, component, topic, {q('offset')}, aggregate_id, msg_id, event_type, error, "
        "attempts, created_at FROM rv_dead_letters"
    )
    params: tuple[Any, ...] = ()
    if component is not None:
        sql += f" WHERE component = {db.mark}"
        params = (component,)
    sql += f" ORDER BY component, topic, aggregate_id, {q('offset')}"
    return [DeadLetter(*r) for r in conn.exec_driver_sql(sql, params).all()]


def parked_sync(db: Database, conn: Connection, component: str) -> set[tuple[str, str]]:
    """(topic, aggregate id) pairs with open dead letters for ``component``."""
    sql = (
        "SELECT DISTINCT topic, aggregate_id FROM rv_dead_letters "
        f"WHERE component = {db.mark} AND aggregate_id IS NOT NULL"
    )
    return {(str(t), str(a)) for t, a in conn.exec_driver_sql(sql, (component,)).all()}


def resolve_sync(db: Database, conn: Connection, letter_id: int) -> None:
    """Remove a dead letter after a successful redrive."""
    conn.exec_driver_sql(f"DELETE FROM rv_dead_letters WHERE id = {db.mark}", (letter_id,))


def bump_sync(db: Database, conn: Connection, letter_id: int, error: str) -> None:
    """Record another failed attempt."""
    conn.exec_driver_sql(
        "UPDATE rv_dead_letters SET attempts = attempts + 1, "
        f"error = {db.mark} WHERE id = {db.mark}",
        (error[:4000], letter_id),
    )


def _err(exc: BaseException) -> str:
    if isinstance(exc, Rejected):
        return f"Rejected {exc.code}: {exc.detail}"
    return f"{type(exc).__name__}: {exc}"


async def redrive(collector: Collector, aggregate_id: str | None) -> RedriveReport:
    """``Collector.redrive``'s work (the caller holds the collector's lock): each
    aggregate's letters in offset order, stopping at its first failure."""
    c, db = collector, collector.db
    groups: dict[tuple[str, str | None], list[DeadLetter]] = {}
    for dl in await c.dead_letters():
        if aggregate_id is None or dl.aggregate_id == aggregate_id:
            groups.setdefault((dl.topic, dl.aggregate_id), []).append(dl)
    ok = stuck = 0
    for (topic, agg), items in groups.items():
        schema = c.topics[topic].schema
        for dl in items:
            rows = await c.store.read(topic, dl.offset, 1)
            ev = envelope_of(schema, topic, rows[0])
            try:
                await c.redo(ev)
            except Exception as exc:
                await db.write(partial(bump_sync, db, letter_id=dl.id, error=_err(exc)))
                stuck += 1
                break
            await db.write(partial(resolve_sync, db, letter_id=dl.id))
            ok += 1
        else:
            if agg is not None:
                c.parked.discard((topic, agg))
    return RedriveReport(ok, stuck)
