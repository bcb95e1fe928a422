"""The Broker port (adapters move bytes + headers) and the URL -> adapter registry.

Example::

    broker = open_broker("memory://")
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import BrokerError
from ..urls import redact_url


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

    An adapter may also offer ``async undeclare(topic)`` (undo a ``declare`` it made);
    the App calls it when a build fails part-way, so nothing is left registered."""

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


#: URL scheme -> "module:factory"; adapters are imported only when their URL is used.
SCHEMES: dict[str, str] = {
    "memory": "reventless.broker.memory:InMemoryBroker.from_url",
    "nats": "reventless_nats:JetStreamBroker.from_url",
    "nats+tls": "reventless_nats:JetStreamBroker.from_url",
    "sns+sqs": "reventless_aws:SnsSqsBroker.from_url",
}
_HINTS = {
    "nats": "pip install reventless-nats",
    "nats+tls": "pip install reventless-nats",
    "sns+sqs": "pip install reventless-aws",
}


def open_broker(url: str) -> Broker:
    """Build the broker adapter for ``url`` (``memory://``, ``nats://...``, ``sns+sqs://...``)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    target = SCHEMES.get(scheme)
    if target is None:
        raise BrokerError(f"unknown broker URL scheme {scheme!r} in {redact_url(url)!r}")
    module_name, attr = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BrokerError(
            f"broker {scheme!r} needs an extra package: {_HINTS.get(scheme, module_name)}"
        ) from exc
    obj: object = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    broker = obj(url)  # type: ignore[operator]
    return broker  # type: ignore[no-any-return]


__all__ = ["SCHEMES", "Broker", "Handler", "Message", "Subscription", "open_broker", "wanted"]
