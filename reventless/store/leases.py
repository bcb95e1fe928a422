"""Leases of leased collector groups: heartbeats, releases and leaves in the store.

One row per (component, topic, partition) in ``rv_collector_leases`` (owner, epoch,
expiry by the store's clock) and one heartbeat row per member in
``rv_collector_members``. The algorithm (fair shares, compare-and-set on the epoch) is
``fairshare.py``'s, the one subscription groups use too; collectors renew a lease that
expired unclaimed and give their excess back themselves once they stopped using it
(``release``). The fence that a batch commit checks is in ``collector.py``.

Example::

    leases = SqlLeaseStore(db)
    grant = await leases.heartbeat("order_summaries", "host-1-42", {"Order": 8}, ttl=10.0)
    await leases.release("order_summaries", "host-1-42", grant.excess)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Protocol

from sqlalchemy.engine import Connection

from . import fairshare
from .database import Database
from .fairshare import COLLECTOR_LEASES, Grant, Part, fair_share

__all__ = [
    "Grant",
    "LeaseStore",
    "Part",
    "SqlLeaseStore",
    "fair_share",
    "heartbeat_sync",
    "holds_sync",
    "leave_sync",
    "release_sync",
]


class LeaseStore(Protocol):
    """The lease table of leased collector groups."""

    async def heartbeat(
        self, component: str, worker: str, topics: Mapping[str, int], ttl: float
    ) -> Grant:
        """Join or stay in ``component``'s group: renew, claim up to the fair share of each
        topic (name -> partition count); ``Grant.excess`` is to give back."""
        ...

    async def release(self, component: str, worker: str, leases: Mapping[Part, int]) -> None:
        """Give back ``leases`` (partition -> epoch) still held at those epochs."""
        ...

    async def leave(self, component: str, worker: str) -> None:
        """Give back every lease of ``worker`` and leave the group."""
        ...


def heartbeat_sync(
    conn: Connection,
    component: str,
    worker: str,
    topics: Mapping[str, int],
    ttl: float,
    *,
    now: float | None = None,
) -> Grant:
    """``LeaseStore.heartbeat`` in the caller's transaction; ``now`` (store-clock
    seconds) is for tests."""
    return fairshare.heartbeat(conn, COLLECTOR_LEASES, (component,), worker, topics, ttl, now=now)


def release_sync(conn: Connection, component: str, worker: str, leases: Mapping[Part, int]) -> None:
    """``LeaseStore.release`` in the caller's transaction."""
    fairshare.release(conn, COLLECTOR_LEASES, (component,), worker, leases)


def leave_sync(conn: Connection, component: str, worker: str) -> None:
    """``LeaseStore.leave`` in the caller's transaction."""
    fairshare.leave(conn, COLLECTOR_LEASES, (component,), worker)


def holds_sync(
    db: Database, conn: Connection, component: str, worker: str, key: Part, epoch: int
) -> bool:
    """Whether ``worker`` holds partition ``key`` at ``epoch`` (the commit fence's test,
    inside the caller's transaction)."""
    q, m = db.q, db.mark
    sql = (
        f"SELECT 1 FROM rv_collector_leases WHERE component = {m} AND topic = {m} "
        f"AND {q('partition')} = {m} AND owner = {m} AND epoch = {m}"
    )
    if not db.is_sqlite:
        sql += " FOR SHARE"
    return conn.exec_driver_sql(sql, (component, key[0], key[1], worker, epoch)).first() is not None


class SqlLeaseStore:
    """``LeaseStore`` on the SQL database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def heartbeat(
        self, component: str, worker: str, topics: Mapping[str, int], ttl: float
    ) -> Grant:
        return await self.db.write(
            partial(heartbeat_sync, component=component, worker=worker, topics=topics, ttl=ttl)
        )

    async def release(self, component: str, worker: str, leases: Mapping[Part, int]) -> None:
        if leases:
            await self.db.write(
                partial(release_sync, component=component, worker=worker, leases=leases)
            )

    async def leave(self, component: str, worker: str) -> None:
        await self.db.write(partial(leave_sync, component=component, worker=worker))
