"""The topics of a store as a subscription reader sees them (read from ``rv_topics`` by
``reventless.store.catalog``, so the gateway needs no application code: schemas are
stored with the topics), and stored rows turned into the JSON of events (``encode.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..codec import META_NAMES
from ..store.catalog import StoredTopic
from .encode import EVENT_NAMES, TAGS_COLUMN, EncodedEvents, encode_events


@dataclass(frozen=True, slots=True)
class TopicInfo(StoredTopic):
    """A stored topic: its table, typed schema, partition count and tenant pin, and the
    names a subscription's events and projections use."""

    @property
    def event_columns(self) -> list[str]:
        """Names a projection (``columns=[...]``) may list."""
        tags = ["tags"] if self.schema.tags_at is not None else []
        return (
            [EVENT_NAMES[n] for n in META_NAMES if n in EVENT_NAMES]
            + tags
            + [c.name for c in self.schema.columns if c.name != TAGS_COLUMN]
        )

    @classmethod
    def of(cls, topic: StoredTopic) -> TopicInfo:
        """The ``TopicInfo`` of a topic read from the store."""
        return cls(topic.name, topic.table, topic.schema, topic.partitions, topic.tenant)


def topic_infos(stored: Mapping[str, StoredTopic]) -> dict[str, TopicInfo]:
    """``TopicInfo`` of every topic the store returned."""
    return {name: TopicInfo.of(t) for name, t in stored.items()}


def events_of(
    info: TopicInfo, rows: Sequence[Sequence[Any]], columns: Sequence[str] | None
) -> EncodedEvents:
    """Stored rows -> events ``{"offset", "type", "key", ..., "data": {...}}`` as JSON,
    projected to ``columns`` (user-facing names; ``offset`` is always kept); see
    ``encode.py``."""
    return encode_events(info.schema, rows, columns)
