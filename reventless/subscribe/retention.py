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
from typing import Any

from ..errors import BadRequestError, TopicNotFoundError
from ..store.catalog import StoredTopic
from ..store.database import Database
from ..store.retention import Behind, RetentionStore, SqlRetentionStore

__all__ = ["Behind", "Retention"]


class Retention:
    """Retention policies of a store's topics and the bulk deletion that applies them."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: The store port every read and write goes through.
        self.store: RetentionStore = SqlRetentionStore(db)

    async def open(self) -> None:
        """Create the retention tables if missing."""
        await self.store.create_tables()

    async def _topic(self, name: str) -> StoredTopic:
        info = (await self.store.topics()).get(name)
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
        await self.store.set_policy(topic, max_age=max_age, max_count=max_count)

    async def policies(self) -> dict[str, dict[str, Any]]:
        """Every topic's policy and horizon."""
        return await self.store.policies()

    async def apply(self, *, now: float | None = None) -> dict[str, int]:
        """Delete what the policies expire, one transaction per topic; returns the number
        of events deleted per topic."""
        topics = await self.store.topics()
        policies = await self.policies()
        at = time.time() if now is None else now
        out: dict[str, int] = {}
        for name in policies:
            info = topics.get(name)
            if info is not None:
                out[name] = await self.store.apply(info, now=at)
        return out

    async def collectors_behind(self, component: str | None = None) -> list[Behind]:
        """Collector checkpoints behind their partition's retained horizon."""
        return await self.store.collectors_behind(component)
