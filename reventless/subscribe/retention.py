"""Retention per topic: keep at most ``max_count`` events and/or events younger than
``max_age`` seconds; older ones are deleted in bulk (one ranged DELETE per topic).

The horizon (the last deleted offset, per topic and per partition) is stored, so a cursor
behind it gets ``ResnapshotRequiredError`` instead of a partial stream: subscriptions on
poll, group members per partition, and collectors (``collectors_behind``, and at start).
The newest event of a topic is never deleted (SQLite derives the next offset from it).
Aggregate topics: loading an aggregate folds its events, so only set a retention on an
aggregate topic whose aggregates are snapshotted or no longer loaded.

Example::

    retention = Retention(db)
    await retention.set("cdc.orders", max_count=1_000_000, max_age=7 * 86_400)
    deleted = await retention.apply()        # {"cdc.orders": 1234}
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import BadRequestError, TopicNotFoundError
from ..store.database import Database
from . import tables
from .catalog import TopicInfo, col, head_sync, load_topics_sync

_R, _H = tables.retention, tables.horizons


@dataclass(frozen=True, slots=True)
class Behind:
    """A collector checkpoint that retention overtook: events after ``checkpoint`` up to
    ``horizon`` were deleted before the collector processed them."""

    component: str
    topic: str
    partition: int
    checkpoint: int
    horizon: int


class Retention:
    """Retention policies of a store's topics and the bulk deletion that applies them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(self) -> None:
        """Create the retention tables if missing."""
        await self.db.write(lambda conn: self.db.create_sync(conn, tables.metadata))

    async def _topic(self, name: str) -> TopicInfo:
        info = (await self.db.read(load_topics_sync)).get(name)
        if info is None:
            raise TopicNotFoundError(f"no topic {name!r}")
        return info

    async def set(
        self, topic: str, *, max_age: float | None = None, max_count: int | None = None
    ) -> None:
        """Set (or, with neither limit, remove) ``topic``'s retention policy."""
        if max_age is not None and not (isinstance(max_age, int | float) and max_age > 0):
            raise BadRequestError(f"max_age must be > 0 seconds, got {max_age!r}")
        if max_count is not None and not (isinstance(max_count, int) and max_count >= 1):
            raise BadRequestError(f"max_count must be >= 1, got {max_count!r}")
        await self._topic(topic)

        def work(conn: Connection) -> None:
            key = _R.c.topic == topic
            if not conn.execute(
                _R.update().where(key).values(max_age=max_age, max_count=max_count)
            ).rowcount:
                conn.execute(
                    _R.insert().values(topic=topic, max_age=max_age, max_count=max_count, horizon=0)
                )

        await self.db.write(work)

    async def policies(self) -> dict[str, dict[str, Any]]:
        """Every topic's policy and horizon."""
        return await self.db.read(
            lambda conn: {
                r.topic: {"max_age": r.max_age, "max_count": r.max_count, "horizon": r.horizon}
                for r in conn.execute(sa.select(_R))
            }
        )

    async def apply(self, *, now: float | None = None) -> dict[str, int]:
        """Delete what the policies expire, one transaction per topic; returns the number
        of events deleted per topic."""
        topics = await self.db.read(load_topics_sync)
        policies = await self.policies()
        at = time.time() if now is None else now
        out: dict[str, int] = {}
        for name in policies:
            info = topics.get(name)
            if info is not None:
                out[name] = await self.db.write(partial(self._apply_sync, info=info, now=at))
        return out

    def _apply_sync(self, conn: Connection, info: TopicInfo, now: float) -> int:
        row = conn.execute(sa.select(_R).where(_R.c.topic == info.name)).first()
        if row is None:
            return 0
        head = head_sync(self.db, conn, info)
        off, table = col("_offset"), sa.table(info.table)
        cut = 0
        if row.max_count is not None:
            cut = head - int(row.max_count)
        if row.max_age is not None:
            oldest = int((now - float(row.max_age)) * 1_000_000)
            stmt = sa.select(sa.func.max(off)).select_from(table)
            aged = conn.execute(stmt.where(col("_produced_at") < oldest)).scalar()
            cut = max(cut, int(aged or 0))
        cut = min(cut, head - 1)
        horizon = int(row.horizon)
        if cut <= horizon:
            return 0
        span = (off > horizon, off <= cut)
        part = col("_partition")
        for p, last in conn.execute(
            sa.select(part, sa.func.max(off)).select_from(table).where(*span).group_by(part)
        ).all():
            key = (_H.c.topic == info.name, _H.c.partition == int(p))
            if not conn.execute(_H.update().where(*key).values(horizon=int(last))).rowcount:
                conn.execute(
                    _H.insert().values(topic=info.name, partition=int(p), horizon=int(last))
                )
        deleted = conn.execute(sa.delete(table).where(*span)).rowcount
        conn.execute(_R.update().where(_R.c.topic == info.name).values(horizon=cut))
        return int(deleted)

    async def collectors_behind(self, component: str | None = None) -> list[Behind]:
        """Collector checkpoints behind their partition's retained horizon."""
        db = self.db
        return await db.read(lambda conn: collectors_behind_sync(db, conn, component))


def collectors_behind_sync(db: Database, conn: Connection, component: str | None) -> list[Behind]:
    """``Retention.collectors_behind`` inside the caller's transaction (no-op before the
    retention tables exist)."""
    if not conn.dialect.has_table(conn, "rv_retention_horizons"):
        return []
    q = db.q
    sql = (
        f"SELECT c.component, c.topic, c.{q('partition')}, c.{q('offset')}, h.horizon "
        f"FROM rv_checkpoints c JOIN rv_retention_horizons h "
        f"ON h.topic = c.topic AND h.{q('partition')} = c.{q('partition')} "
        f"WHERE c.{q('offset')} < h.horizon"
    )
    params: tuple[Any, ...] = ()
    if component is not None:
        sql += f" AND c.component = {db.mark}"
        params = (component,)
    return [
        Behind(str(c), str(t), int(p), int(o), int(h))
        for c, t, p, o, h in conn.exec_driver_sql(sql, params).all()
    ]
