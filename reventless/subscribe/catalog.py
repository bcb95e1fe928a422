"""The topics of a store as a subscription reader sees them (read from ``rv_topics`` by
``reventless.store.catalog``, so the gateway needs no application code: schemas are
stored with the topics), and stored rows turned into JSON-ready events."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from ..codec import META_NAMES
from ..predicate import COLUMN_ALIASES
from ..store.catalog import StoredTopic

#: Stored metadata column -> the name it has in a subscription's JSON events.
EVENT_NAMES: dict[str, str] = {
    "_offset": "offset",
    "_type": "type",
    "_aggregate_id": "key",
    **{c: a for a, c in COLUMN_ALIASES.items() if a not in ("key", "aggregate_id", "type")},
}
_HIDDEN = {"_row_idx"}


@dataclass(frozen=True, slots=True)
class TopicInfo(StoredTopic):
    """A stored topic: its table, typed schema, partition count and tenant pin, and the
    names a subscription's events and projections use."""

    @property
    def event_columns(self) -> list[str]:
        """Names a projection (``columns=[...]``) may list."""
        return [EVENT_NAMES[n] for n in META_NAMES if n in EVENT_NAMES] + [
            c.name for c in self.schema.columns
        ]

    @classmethod
    def of(cls, topic: StoredTopic) -> TopicInfo:
        """The ``TopicInfo`` of a topic read from the store."""
        return cls(topic.name, topic.table, topic.schema, topic.partitions, topic.tenant)


def topic_infos(stored: Mapping[str, StoredTopic]) -> dict[str, TopicInfo]:
    """``TopicInfo`` of every topic the store returned."""
    return {name: TopicInfo.of(t) for name, t in stored.items()}


def to_json_value(v: Any) -> Any:
    """A JSON-compatible form of a decoded Arrow value."""
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, timedelta):
        return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, list):
        return [to_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_json_value(x) for k, x in v.items()}
    return v


def events_of(
    info: TopicInfo, rows: Sequence[Sequence[Any]], columns: Sequence[str] | None
) -> list[dict[str, Any]]:
    """Stored rows -> JSON-ready events ``{"offset", "type", "key", ..., "data": {...}}``,
    projected to ``columns`` (user-facing names; ``offset`` is always kept)."""
    if not rows:
        return []
    decoded = info.schema.to_arrow([tuple(r) for r in rows]).to_pylist()
    json_cols = {c.name for c in info.schema.columns if c.sql_kind == "json"}
    fields = [c.name for c in info.schema.columns]
    keep = None if columns is None else set(columns) | {"offset"}
    out = []
    for d in decoded:
        ev: dict[str, Any] = {}
        for stored, name in EVENT_NAMES.items():
            if stored not in _HIDDEN and (keep is None or name in keep):
                ev[name] = to_json_value(d[stored])
        data = {}
        for f in fields:
            if keep is not None and f not in keep:
                continue
            v = d[f]
            if f in json_cols and isinstance(v, str):
                v = json.loads(v)
            data[f] = to_json_value(v)
        if data or keep is None:
            ev["data"] = data
        out.append(ev)
    return out
