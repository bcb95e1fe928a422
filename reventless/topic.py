"""Topic definitions: a named, typed, append-only stream of rows (events)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Literal

from .codec import TopicSchema
from .errors import SpecError

TopicKind = Literal["aggregate", "model", "arrow"]


@dataclass(frozen=True, slots=True)
class TopicDef:
    """What the store and broker need to know about a topic.

    ``tenant`` pins the topic to one tenant (``None``: global). ``key`` names the
    column that partitions a schema topic (its rows' ``_aggregate_id``), so that
    per-key order is kept by brokers. ``partitions`` (fixed when the topic is created)
    splits the topic by aggregate id: each event's ``_partition`` is
    ``crc32(aggregate_id) % partitions``; order is kept per partition, and a collector
    group's members share the partitions.
    """

    name: str
    schema: TopicSchema
    kind: TopicKind
    tenant: str | None = None
    key: str | None = None
    partitions: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 1024:
            raise SpecError(f"topic {self.name!r}: partitions must be 1..1024")


def partition_of(aggregate_id: str | None, partitions: int) -> int:
    """The partition of an aggregate (stable across processes and runs)."""
    if partitions == 1 or aggregate_id is None:
        return 0
    return zlib.crc32(aggregate_id.encode()) % partitions
