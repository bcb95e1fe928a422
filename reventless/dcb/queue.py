"""In-process queues of decisions whose queries overlap.

Two decisions of one process that read the same tag (or the same event type, for a
query item without tags) would clash in the store and retry: one's append makes the
other's condition fail. ``DecisionQueue`` lets them take turns instead, like commands on
one aggregate queue up in an ``EventLog``. Decisions in other processes are still caught
by the append condition; the queue only saves retries (and the reads they cost), it
guarantees nothing by itself.

A decision holds the keys of its union query: every tag of an item with tags, else every
type of the item, else the whole log. Keys are taken in sorted order, so two decisions
never wait for each other in a cycle.

Example::

    queue = DecisionQueue()
    async with queue.hold(queue_keys(query)):
        ...  # read, decide, append
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from ..tags import Query

__all__ = ["DecisionQueue", "queue_keys"]


def queue_keys(query: Query) -> list[str]:
    """The keys a decision on ``query`` holds, sorted."""
    keys: set[str] = set()
    for item in query.items:
        if item.tags:
            keys.update(f"tag\0{t}" for t in item.tags)
        elif item.types:
            keys.update(f"type\0{t}" for t in item.types)
        else:
            keys.add("*")
    return sorted(keys)


class DecisionQueue:
    """Per-key locks for the decisions of one log in one process (released when unused).

    Example::

        async with DecisionQueue().hold(["tag\\0course:c1"]):
            ...
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        """Hold every key of ``keys`` (sorted, distinct) for the body."""
        registered: list[str] = []
        acquired: list[asyncio.Lock] = []
        try:
            for key in sorted(set(keys)):
                entry = self._locks.get(key)
                if entry is None:
                    entry = self._locks[key] = (asyncio.Lock(), [0])
                entry[1][0] += 1
                registered.append(key)
                await entry[0].acquire()  # cancelled while waiting: not acquired
                acquired.append(entry[0])
            yield
        finally:
            for lock in reversed(acquired):
                lock.release()
            for key in registered:
                users = self._locks[key][1]
                users[0] -= 1
                if not users[0]:
                    del self._locks[key]

    def __len__(self) -> int:
        """Keys held or waited for now."""
        return len(self._locks)
