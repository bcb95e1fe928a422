"""Topic definitions: a named, typed, append-only stream of rows (events)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .codec import TopicSchema

TopicKind = Literal["aggregate", "model", "arrow"]


@dataclass(frozen=True, slots=True)
class TopicDef:
    """What the store and broker need to know about a topic.

    ``tenant`` pins the topic to one tenant (``None``: global). ``key`` names the
    column that partitions a schema topic (its rows' ``_aggregate_id``), so that
    per-key order is kept by brokers.
    """

    name: str
    schema: TopicSchema
    kind: TopicKind
    tenant: str | None = None
    key: str | None = None
