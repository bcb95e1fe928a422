"""The Broker port: adapters move bytes and headers (``Message``) between the relay and
the collectors. ``Broker`` is the port every adapter implements; what some adapters offer
beyond it is typed in ``reventless.broker.capabilities``.

Example::

    await broker.publish([Message("Order", data, msg_id="m-1", key="3")])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Message:
    """One broker message: an encoded batch of a topic's events and its headers.

    ``msg_id`` is stable for the same content, so brokers can drop duplicate
    publishes; ``key`` is the partition key (per-key order is kept).
    """

    topic: str
    data: bytes
    msg_id: str
    headers: Mapping[str, str] = field(default_factory=dict)
    key: str = ""

    @property
    def partition(self) -> int | None:
        """The topic partition the message belongs to (its key), if it has one."""
        return int(self.key) if self.key.isdigit() else None


def wanted(partitions: Collection[int] | None, msg: Message) -> bool:
    """Whether a subscriber restricted to ``partitions`` (None: all) takes ``msg``."""
    return partitions is None or msg.partition is None or msg.partition in partitions


#: Receives the messages available right now (at least one, in order per key).
#: Returning acks them all; raising asks for redelivery of all of them.
Handler = Callable[[Sequence[Message]], Awaitable[None]]


class Subscription(Protocol):
    """A live subscription; ``close`` stops delivery."""

    async def close(self) -> None:
        """Stop delivering to this subscription."""


class Broker(Protocol):
    """Fan-out transport. Returning from a handler acks; raising asks for redelivery.

    An adapter may offer more (undo a ``declare``, dead-letter queues, an order guarantee
    per group, a message size limit, filtering by event type): the typed capabilities in
    ``reventless.broker.capabilities``."""

    async def connect(self) -> None:
        """Open connections (idempotent)."""

    async def declare(self, topic: str) -> None:
        """Create the broker-side state of ``topic`` (idempotent)."""

    async def publish(self, messages: Sequence[Message]) -> None:
        """Send messages; raise ``BrokerError`` if the broker did not take them."""

    async def subscribe(
        self,
        group: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        partitions: Collection[int] | None = None,
    ) -> Subscription:
        """Join consumer ``group`` on ``topics``; ``handler`` receives batches.

        ``partitions`` restricts delivery to messages of those topic partitions (a
        member of a collector group); the rest are acknowledged without delivery."""
        ...

    async def close(self) -> None:
        """Close connections and stop every subscription."""


__all__ = ["Broker", "Handler", "Message", "Subscription", "wanted"]
