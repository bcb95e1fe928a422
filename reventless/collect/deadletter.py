"""Dead letters: events a component gave up on, parked per aggregate until redriven."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from ..spec import Envelope
from ..store.database import Database


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One parked event of one component, with the error that parked it."""

    id: int
    component: str
    topic: str
    offset: int
    aggregate_id: str | None
    msg_id: str
    event_type: str
    error: str
    attempts: int
    created_at_us: int


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
