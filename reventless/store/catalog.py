"""Topic tables as store readers see them: the registered topics (``rv_topics``, with
their stored schemas, so a reader needs no application code), a topic's head, the
retained horizon, and filtered ranged reads of a topic table. Shared by subscriptions
(``subscriptions.py``) and retention (``retention.py``); each function runs inside the
caller's transaction.

Example::

    topics = db.read_sync(load_topics_sync)
    rows = db.read_sync(lambda c: read_sync(c, topics["orders"], 1, 100, [], 50))
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_NAMES, TopicSchema
from . import subscription_tables as tables
from .database import Database


@dataclass(frozen=True, slots=True)
class StoredTopic:
    """A topic as the store registered it: its table, typed schema, partition count and
    tenant pin."""

    name: str
    table: str
    schema: TopicSchema
    partitions: int
    tenant: str | None

    @property
    def names(self) -> list[str]:
        """Stored column names in row order."""
        return list(self.schema.arrow_schema.names)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What a read keeps: rows where the compiled ``predicate`` (a SQLAlchemy clause from
    ``reventless.predicate``; None: all) holds, of the event ``types`` (None: all) and of
    ``tenant`` (None: every tenant)."""

    predicate: Any = None
    types: tuple[str, ...] | None = None
    tenant: str | None = None


def col(name: str) -> sa.ColumnClause[Any]:
    """A column of a topic table by its stored name (typed for mypy)."""
    return sa.column(name)


def load_topics_sync(conn: Connection) -> dict[str, StoredTopic]:
    """Every topic registered in the store."""
    out: dict[str, StoredTopic] = {}
    rows = conn.exec_driver_sql(
        "SELECT name, table_name, arrow_schema, partitions, tenant FROM rv_topics"
    ).all()
    for name, table, encoded, parts, tenant in rows:
        full = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded)))
        fields = pa.schema([f for f in full if f.name not in META_NAMES])
        schema = TopicSchema.from_arrow(str(name), fields)
        out[str(name)] = StoredTopic(str(name), str(table), schema, int(parts), tenant)
    return out


def head_sync(db: Database, conn: Connection, info: StoredTopic) -> int:
    """The topic's last committed offset (0 when empty)."""
    stmt: sa.Select[Any]
    if db.is_sqlite:  # the newest row is never deleted (retention keeps it)
        stmt = sa.select(sa.func.max(col("_offset"))).select_from(sa.table(info.table))
    else:
        stmt = sa.select(col("head")).select_from(sa.table("rv_topics"))
        stmt = stmt.where(col("name") == info.name)
    return int(conn.execute(stmt).scalar() or 0)


def horizon_sync(conn: Connection, topic: str) -> int:
    """The last offset of ``topic`` that retention deleted (0: none)."""
    t = tables.retention
    return int(conn.execute(sa.select(t.c.horizon).where(t.c.topic == topic)).scalar() or 0)


def clauses(where: EventFilter) -> list[sa.ColumnElement[bool]]:
    """The SQL clauses of a filter: predicate, types, tenant."""
    out: list[sa.ColumnElement[bool]] = []
    if where.predicate is not None:
        out.append(where.predicate)
    if where.types:
        out.append(col("_type").in_(list(where.types)))
    if where.tenant is not None:
        out.append(col("_tenant") == sa.bindparam(None, where.tenant, type_=sa.Text()))
    return out


def read_sync(
    conn: Connection,
    info: StoredTopic,
    start: int,
    head: int,
    where: Sequence[sa.ColumnElement[bool]],
    limit: int,
) -> list[tuple[Any, ...]]:
    """Matching rows with ``start <= _offset <= head`` in offset order, at most ``limit``."""
    off = col("_offset")
    stmt = (
        sa.select(*(col(n) for n in info.names))
        .select_from(sa.table(info.table))
        .where(off >= start, off <= head, *where)
        .order_by(off)
        .limit(limit)
    )
    return [tuple(r) for r in conn.execute(stmt).all()]  # one fetchall, not a fetch per row
