"""The topics of a store as a subscription reader sees them: read from ``rv_topics``, so
the gateway needs no application code (schemas are stored with the topics)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_NAMES, TopicSchema
from ..predicate import COLUMN_ALIASES
from ..store.database import Database

#: Stored metadata column -> the name it has in a subscription's JSON events.
EVENT_NAMES: dict[str, str] = {
    "_offset": "offset",
    "_type": "type",
    "_aggregate_id": "key",
    **{c: a for a, c in COLUMN_ALIASES.items() if a not in ("key", "aggregate_id", "type")},
}
_HIDDEN = {"_row_idx"}


def col(name: str) -> sa.ColumnClause[Any]:
    """A column of a topic table by its stored name (typed for mypy)."""
    return sa.column(name)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A stored topic: its table, typed schema, partition count and tenant pin."""

    name: str
    table: str
    schema: TopicSchema
    partitions: int
    tenant: str | None

    @property
    def names(self) -> list[str]:
        """Stored column names in row order."""
        return list(self.schema.arrow_schema.names)

    @property
    def event_columns(self) -> list[str]:
        """Names a projection (``columns=[...]``) may list."""
        return [EVENT_NAMES[n] for n in META_NAMES if n in EVENT_NAMES] + [
            c.name for c in self.schema.columns
        ]


def load_topics_sync(conn: Connection) -> dict[str, TopicInfo]:
    """Every topic registered in the store."""
    out: dict[str, TopicInfo] = {}
    rows = conn.exec_driver_sql(
        "SELECT name, table_name, arrow_schema, partitions, tenant FROM rv_topics"
    ).all()
    for name, table, encoded, parts, tenant in rows:
        full = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))
        fields = pa.schema([f for f in full if f.name not in META_NAMES])
        schema = TopicSchema.from_arrow(str(name), fields)
        out[str(name)] = TopicInfo(str(name), str(table), schema, int(parts), tenant)
    return out


def head_sync(db: Database, conn: Connection, info: TopicInfo) -> int:
    """The topic's last committed offset (0 when empty)."""
    stmt: sa.Select[Any]
    if db.is_sqlite:  # the newest row is never deleted (retention keeps it)
        stmt = sa.select(sa.func.max(col("_offset"))).select_from(sa.table(info.table))
    else:
        stmt = sa.select(col("head")).select_from(sa.table("rv_topics"))
        stmt = stmt.where(col("name") == info.name)
    return int(conn.execute(stmt).scalar() or 0)


def partition_heads_sync(conn: Connection, info: TopicInfo) -> dict[int, int]:
    """The last offset of every partition (0 when empty)."""
    p, o = col("_partition"), col("_offset")
    stmt = sa.select(p, sa.func.max(o)).select_from(sa.table(info.table)).group_by(p)
    got = {int(k): int(v) for k, v in conn.execute(stmt).all()}
    return {k: got.get(k, 0) for k in range(info.partitions)}


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
