"""``Channels``: an application's topics and collectors as a broker sees them (topics with
their partitions and event types; per consumer group the topics it reads, the event types
it needs of each, its order and its partitions). Plain frozen values: the core derives
them from an App's declarations (``reventless.topology``) and broker adapters turn them
into their own infrastructure documents (the ``synth`` hook of a ``BrokerPlugin``).

Example::

    Channels({"Order": (4, frozenset({"OrderPlaced"}))},
             [CollectorChannel("audit", {"Order": None})])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class CollectorChannel:
    """A collector as the broker sees it: its consumer group, the topics it reads, and per
    topic the event types it handles and its ``where=`` predicate allows (``None``: every
    row, e.g. a schema-topic handler)."""

    group: str
    topics: dict[str, frozenset[str] | None]
    ordered: bool = True
    #: The topic partitions this channel carries, when it is one static member's share
    #: or one leased partition's consumer group (None: all of them).
    partitions: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Channels:
    """Topics (name -> partitions and event types) and collectors of an application."""

    topics: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)
    collectors: list[CollectorChannel] = field(default_factory=list)

    def validate(self) -> None:
        """Every collector reads declared topics."""
        for c in self.collectors:
            for t in c.topics:
                if t not in self.topics:
                    raise SpecError(f"collector {c.group!r} reads undeclared topic {t!r}")


__all__ = ["Channels", "CollectorChannel"]
