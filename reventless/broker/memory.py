"""``InMemoryBroker``: the default, in-process broker (a real implementation of the port)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ..errors import BrokerError
from .capabilities import BrokerCapabilities
from .plugin import BrokerPlugin
from .port import Handler, Message, wanted

log = logging.getLogger("reventless.broker")


@dataclass(slots=True)
class _Member:
    handler: Handler
    partitions: Collection[int] | None = None
    queue: asyncio.Queue[Message] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class _Group:
    def __init__(self, name: str, topics: Sequence[str]) -> None:
        self.name = name
        self.topics = set(topics)
        self.members: list[_Member] = []

    def route(self, msg: Message) -> _Member | None:
        members = [m for m in self.members if wanted(m.partitions, msg)]
        if not members:
            return None
        # Per-key order: one key always goes to the same member of the group.
        return members[hash(msg.key) % len(members)]


class InMemorySubscription:
    """Handle returned by ``InMemoryBroker.subscribe``."""

    def __init__(self, broker: InMemoryBroker, group: _Group, member: _Member) -> None:
        self._broker, self._group, self._member = broker, group, member

    async def close(self) -> None:
        """Stop delivering to this member (queued messages are dropped: the store has them)."""
        if self._member in self._group.members:
            self._group.members.remove(self._member)
        if self._member.task is not None:
            self._member.task.cancel()
            await asyncio.gather(self._member.task, return_exceptions=True)


class InMemoryBroker:
    """In-process fan-out with per-key order, redelivery and duplicate suppression.

    Each subscribe ``group`` gets every message of its topics once; several
    subscriptions with one group name share the load, partitioned by message key.
    ``set_available(False)`` simulates an outage (publish raises ``BrokerError``).

    Example::

        broker = InMemoryBroker()
        await broker.subscribe("audit", ["Customer"], handler)
    """

    #: No size limit, no filtering by event type.
    capabilities = BrokerCapabilities()

    def __init__(
        self, *, max_deliver: int = 5, max_batch: int = 100, dedup_window: int = 100_000
    ) -> None:
        self.max_deliver = max_deliver
        self.max_batch = max_batch
        self._groups: dict[str, _Group] = {}
        self._topics: set[str] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._window = dedup_window
        self._available = True
        self.published = 0
        self.duplicates_dropped = 0

    @classmethod
    def from_url(cls, url: str) -> InMemoryBroker:
        """``memory://`` (no options)."""
        return cls()

    def set_available(self, available: bool) -> None:
        """Simulate a broker outage (``False``) or its recovery (``True``)."""
        self._available = available

    async def connect(self) -> None:
        """Nothing to connect to."""

    async def declare(self, topic: str) -> None:
        """Record the topic (broker-side state of a topic)."""
        if not self._available:
            raise BrokerError("in-memory broker is unavailable")
        self._topics.add(topic)

    async def undeclare(self, topic: str) -> None:
        """Forget a topic (undo of ``declare`` for a failed build)."""
        self._topics.discard(topic)

    async def publish(self, messages: Sequence[Message]) -> None:
        """Deliver to every subscribed group; a message id seen before is dropped."""
        if not self._available:
            raise BrokerError("in-memory broker is unavailable")
        for msg in messages:
            if msg.msg_id in self._seen:
                self.duplicates_dropped += 1
                continue
            self._seen[msg.msg_id] = None
            if len(self._seen) > self._window:
                self._seen.popitem(last=False)
            self.published += 1
            for group in self._groups.values():
                if msg.topic in group.topics:
                    member = group.route(msg)
                    if member is not None:
                        member.queue.put_nowait(msg)

    def has_subscribers(self, topic: str) -> bool:
        """Whether a group with a member subscribes to ``topic`` (``SubscriberAware``)."""
        groups = self._groups  # (none: asked after every commit of a writer-only App)
        return bool(groups) and any(topic in g.topics and g.members for g in groups.values())

    async def subscribe(
        self,
        group: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        partitions: Collection[int] | None = None,
    ) -> InMemorySubscription:
        """Join consumer ``group`` for ``topics``; ``handler`` gets what is queued, in order."""
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group(group, topics)
        else:
            g.topics.update(topics)
        member = _Member(handler, None if partitions is None else frozenset(partitions))
        g.members.append(member)
        member.task = asyncio.get_running_loop().create_task(self._consume(group, member))
        return InMemorySubscription(self, g, member)

    async def _consume(self, group: str, member: _Member) -> None:
        while True:
            batch = [await member.queue.get()]
            while len(batch) < self.max_batch and not member.queue.empty():
                batch.append(member.queue.get_nowait())
            for attempt in range(1, self.max_deliver + 1):
                try:
                    await member.handler(batch)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if attempt == self.max_deliver:
                        # Give up on the message: the consumer catches up from the store.
                        log.error(
                            "group %s dropped %d messages after %d tries: %s",
                            group,
                            len(batch),
                            attempt,
                            exc,
                        )
                    else:
                        await asyncio.sleep(min(0.5, 0.01 * 2**attempt) * random.uniform(0.5, 1.5))

    async def close(self) -> None:
        """Cancel every consumer task."""
        tasks = [m.task for g in self._groups.values() for m in g.members if m.task]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._groups.clear()


#: The ``memory://`` plugin (entry point ``memory`` in the ``reventless.brokers`` group).
PLUGIN = BrokerPlugin(("memory",), InMemoryBroker.from_url)
