"""DDL of topic tables: SQL column types per codec kind, creation and evolution."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_FIELDS, META_NAMES, META_SQL_KINDS, TAGS_COLUMN, Column
from ..errors import SchemaMismatchError
from ..topicdef import TopicDef
from .database import Database, table_name

KIND_TYPES: dict[str, Callable[[], Any]] = {
    "int": sa.BigInteger,
    "float": sa.Double,
    "bool": sa.Boolean,
    "text": sa.Text,
    "blob": sa.LargeBinary,
    "json": sa.Text,
}

PG_TYPES = {
    "int": "int8",
    "float": "float8",
    "bool": "bool",
    "text": "text",
    "blob": "bytea",
    "json": "text",
}


def topic_table(topic: TopicDef) -> sa.Table:
    """The SQL table of a topic: metadata columns, then one column per field."""
    md = sa.MetaData()
    name = table_name("ev_", topic.name)
    cols: list[sa.Column[Any]] = []
    for meta_field, kind in zip(META_FIELDS, META_SQL_KINDS, strict=True):
        meta_name, nullable = meta_field.name, meta_field.nullable
        col_type = KIND_TYPES[kind]()
        if meta_name == "_offset":  # on SQLite: the rowid itself, no second index
            col_type = col_type.with_variant(sa.Integer(), "sqlite")
        cols.append(
            sa.Column(
                meta_name,
                col_type,
                primary_key=meta_name == "_offset",
                autoincrement=False,
                nullable=nullable,
            )
        )
    cols.extend(field_column(c) for c in topic.schema.columns)
    extra: list[Any] = []
    if topic.partitions > 1:  # per-partition reads and heads; one partition needs none
        extra.append(sa.Index(f"ix_{name}_partition", "_partition", "_offset"))
    return sa.Table(
        name,
        md,
        *cols,
        sa.UniqueConstraint("_aggregate_id", "_version", name=f"uq_{name}_version"),
        *extra,
    )


def field_column(c: Column) -> sa.Column[Any]:
    """The SQL column of a field column."""
    return sa.Column(c.name, KIND_TYPES[c.sql_kind](), nullable=c.nullable)


def evolve(db: Database, conn: Connection, topic: TopicDef, table: str) -> None:
    """Bring a stored topic table to a changed spec: only nullable columns may be added."""
    existing = {c["name"]: c for c in sa.inspect(conn).get_columns(table)}
    for f, kind in zip(META_FIELDS, META_SQL_KINDS, strict=True):
        if f.name not in existing and f.nullable:  # a metadata column added since (_trace)
            col_type = KIND_TYPES[kind]().compile(dialect=conn.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {db.q(table)} ADD COLUMN {db.q(f.name)} {col_type}")
    for c in topic.schema.columns:
        have = existing.get(c.name)
        if have is None:
            col_type = KIND_TYPES[c.sql_kind]().compile(dialect=conn.dialect)
            if c.name == TAGS_COLUMN:  # events that gained Tag fields: the old ones have none
                col_type += " NOT NULL DEFAULT '[]'"
            elif not c.nullable:
                raise SchemaMismatchError(
                    f"topic {topic.name!r}: new column {c.name!r} must be nullable"
                )
            conn.exec_driver_sql(f"ALTER TABLE {db.q(table)} ADD COLUMN {db.q(c.name)} {col_type}")
            continue
        want = KIND_TYPES[c.sql_kind]()
        # SQLAlchemy has no public name for a type's generic class (its "affinity")
        if have["type"]._type_affinity is not want._type_affinity:  # noqa: SLF001
            raise SchemaMismatchError(
                f"topic {topic.name!r}: column {c.name!r} is stored as {have['type']}, "
                f"the spec now says {c.sql_kind}"
            )
    declared = {c.name for c in topic.schema.columns} | set(META_NAMES)
    dropped = sorted(set(existing) - declared)
    if dropped:
        raise SchemaMismatchError(
            f"topic {topic.name!r}: stored columns {dropped} are missing from the spec "
            "(columns can be added, never removed: keep them as `retired` fields of an "
            "@rv.upcasts upcaster)"
        )
