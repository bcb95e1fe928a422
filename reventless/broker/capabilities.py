"""What a broker offers beyond the ``Broker`` port, typed so the core never probes for it.

Optional operations are ``runtime_checkable`` Protocols (the core asks ``isinstance(broker,
Undeclaring)`` and mypy then knows the method); limits and switches are one frozen
``BrokerCapabilities`` value a broker declares as ``capabilities`` (a broker that declares
none has the defaults: no size limit, no filtering by event type).

Example::

    if isinstance(broker, DeadLetterQueues):
        letters = await broker.dead_letters("audit")
    limit = capabilities_of(broker).max_message_bytes
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..deadletter import DeadLetter


@dataclass(frozen=True, slots=True)
class BrokerCapabilities:
    """Limits and switches of a broker (the defaults: none)."""

    #: Payload bytes one message may carry; the relay splits larger pages to fit (None:
    #: no limit).
    max_message_bytes: int | None = None
    #: ``subscribe`` takes ``types=`` (per topic, the event types a group needs) and the
    #: broker drops messages holding none of them (SNS filter policies).
    filters_types: bool = False


@runtime_checkable
class DeclaresCapabilities(Protocol):
    """A broker that declares its ``BrokerCapabilities``."""

    @property
    def capabilities(self) -> BrokerCapabilities:
        """This broker's limits and switches (may change once it is connected)."""
        ...


@runtime_checkable
class Undeclaring(Protocol):
    """A broker that can undo a ``declare`` (the App calls it when a build fails part-way,
    so nothing is left registered)."""

    async def undeclare(self, topic: str) -> None:
        """Remove the broker-side state of ``topic`` if this broker created it."""


@runtime_checkable
class SubscriberAware(Protocol):
    """A broker that knows whether anyone receives a topic's messages now (an in-process
    broker does; a durable one that keeps messages for later consumers does not say).
    The relay does not encode what no one would receive: a consumer that subscribes
    later catches up from the store, as collectors do."""

    def has_subscribers(self, topic: str) -> bool:
        """Whether a message published to ``topic`` now would reach a consumer."""
        ...


@runtime_checkable
class OrderAware(Protocol):
    """A broker whose channels may be unordered: the App refuses to bind a collector that
    needs per-aggregate order to a group that is delivered unordered."""

    def delivers_in_order(self, group: str) -> bool:
        """Whether consumer ``group`` gets each partition key's messages in order."""
        ...


@runtime_checkable
class DeadLetterQueues(Protocol):
    """A broker with dead-letter queues: messages it gave up on, listed and moved back."""

    async def dead_letters(self, group: str | None = None) -> list[DeadLetter]:
        """The messages in ``group``'s dead-letter queue (``id`` 0: not store rows)."""
        ...

    async def redrive(self, group: str) -> int:
        """Move ``group``'s dead letters back to its queue, in order; how many moved."""
        ...


def capabilities_of(broker: object) -> BrokerCapabilities:
    """``broker``'s declared capabilities, or the defaults if it declares none."""
    if isinstance(broker, DeclaresCapabilities):
        return broker.capabilities
    return BrokerCapabilities()


__all__ = [
    "BrokerCapabilities",
    "DeadLetterQueues",
    "DeclaresCapabilities",
    "OrderAware",
    "SubscriberAware",
    "Undeclaring",
    "capabilities_of",
]
