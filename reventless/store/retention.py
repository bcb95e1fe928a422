"""Retention in the store: policies per topic, the ranged deletion that applies them, and
the horizons (per topic and per partition: the last deleted offset) that cursors and
collector checkpoints are checked against.

``RetentionStore`` is the port ``reventless.subscribe.Retention`` and the collectors
(``ensure_horizons``, ``horizon_past``) use; each method is one transaction. The newest
event of a topic is never deleted (SQLite derives the next offset from it).

Example::

    store = SqlRetentionStore(db)
    await store.set_policy("orders", max_age=None, max_count=1_000)
    deleted = await store.apply((await store.topics())["orders"], now=time.time())
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import subscription_tables as tables
from .catalog import StoredTopic, col, head_sync, load_topics_sync
from .database import Database
from .tagindex import tag_table

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


class RetentionStore(Protocol):
    """Retention policies, their application and the horizons they leave."""

    async def create_tables(self) -> None:
        """Create the retention (and subscription) tables if missing."""
        ...

    async def topics(self) -> dict[str, StoredTopic]:
        """Every topic registered in the store."""
        ...

    async def set_policy(self, topic: str, *, max_age: float | None, max_count: int | None) -> None:
        """Set ``topic``'s limits (both None: no limit; its horizon is kept)."""
        ...

    async def policies(self) -> dict[str, dict[str, Any]]:
        """Every topic's policy and horizon (``max_age``, ``max_count``, ``horizon``)."""
        ...

    async def apply(self, topic: StoredTopic, *, now: float) -> int:
        """Delete what ``topic``'s policy expires at ``now`` (one transaction), moving its
        horizons; the number of events deleted."""
        ...

    async def collectors_behind(self, component: str | None = None) -> list[Behind]:
        """Collector checkpoints behind their partition's retained horizon."""
        ...

    async def ensure_horizons(self) -> None:
        """Create the per-partition horizons table if missing (collectors check it)."""
        ...

    async def horizon_past(self, topic: str, partition: int, checkpoint: int) -> int | None:
        """The partition's horizon if retention deleted events after ``checkpoint``."""
        ...


class SqlRetentionStore:
    """``RetentionStore`` on a SQL ``Database`` (SQLite, PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        await self.db.write(lambda conn: self.db.create_sync(conn, tables.metadata))

    async def topics(self) -> dict[str, StoredTopic]:
        return await self.db.read(load_topics_sync)

    async def set_policy(self, topic: str, *, max_age: float | None, max_count: int | None) -> None:
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
        return await self.db.read(
            lambda conn: {
                r.topic: {"max_age": r.max_age, "max_count": r.max_count, "horizon": r.horizon}
                for r in conn.execute(sa.select(_R))
            }
        )

    async def apply(self, topic: StoredTopic, *, now: float) -> int:
        return await self.db.write(partial(self._apply_sync, info=topic, now=now))

    def _apply_sync(self, conn: Connection, info: StoredTopic, now: float) -> int:
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
        tags = tag_table(info.name)
        if conn.dialect.has_table(conn, tags):  # a tagged topic: its index rows go too
            conn.execute(sa.delete(sa.table(tags)).where(*span))
        conn.execute(_R.update().where(_R.c.topic == info.name).values(horizon=cut))
        return int(deleted)

    async def collectors_behind(self, component: str | None = None) -> list[Behind]:
        db = self.db
        return await db.read(lambda conn: collectors_behind_sync(db, conn, component))

    async def ensure_horizons(self) -> None:
        def create(conn: Connection) -> None:
            self.db.serialize_ddl(conn)  # processes starting at once take turns
            _H.create(conn, checkfirst=True)

        await self.db.write(create)

    async def horizon_past(self, topic: str, partition: int, checkpoint: int) -> int | None:
        stmt = sa.select(_H.c.horizon).where(_H.c.topic == topic, _H.c.partition == partition)
        found = await self.db.read(lambda conn: conn.execute(stmt).scalar())
        if found is None or int(found) <= checkpoint:
            return None
        return int(found)


def collectors_behind_sync(db: Database, conn: Connection, component: str | None) -> list[Behind]:
    """``collectors_behind`` inside the caller's transaction (no-op before the retention
    tables exist)."""
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
