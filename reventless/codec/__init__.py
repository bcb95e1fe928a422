"""Conversions between pydantic events, SQL column values and typed Arrow data.

A topic stores one SQL column per event field (after the log's metadata columns) and is
exposed as an Arrow schema that Spark can read: no union, dictionary or extension types.
``TopicSchema`` maps annotations to columns once and precompiles the per-event functions.

SQL value conventions: datetimes are fixed-width UTC ISO text
(``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``, so text order is time order); **naive datetimes are
taken as UTC** and decoded datetimes are always tz-aware UTC. Dates, times and decimals are
text, durations are integer microseconds, and nested values (models, lists, sets, dicts,
``Any``, unions) are compact JSON text.

Example::

    schema = TopicSchema.from_events("customers", [Created, Renamed])
    row = schema.encoder("Created")(Created(name="Ada"))
    assert schema.decode("Created", row) == Created(name="Ada")
"""

from __future__ import annotations

from .columns import (
    AGGREGATE_AT,
    CORRELATION_AT,
    FIELDS_AT,
    META_FIELDS,
    META_NAMES,
    META_SQL_KINDS,
    MSG_ID_AT,
    OFFSET_AT,
    PARTITION_AT,
    PERSONAL_KEY,
    PRODUCED_AT_AT,
    ROW_IDX_AT,
    SCHEMA_VERSION_AT,
    TENANT_AT,
    TRACE_AT,
    TYPE_AT,
    VERSION_AT,
    Column,
    Plaintext,
    SqlKind,
)
from .schema import TAGS_COLUMN, TAGS_TYPE, TopicSchema, add_tags

__all__ = [
    "AGGREGATE_AT",
    "CORRELATION_AT",
    "FIELDS_AT",
    "META_FIELDS",
    "META_NAMES",
    "META_SQL_KINDS",
    "MSG_ID_AT",
    "OFFSET_AT",
    "PARTITION_AT",
    "PERSONAL_KEY",
    "PRODUCED_AT_AT",
    "ROW_IDX_AT",
    "SCHEMA_VERSION_AT",
    "TAGS_COLUMN",
    "TAGS_TYPE",
    "TENANT_AT",
    "TRACE_AT",
    "TYPE_AT",
    "VERSION_AT",
    "Column",
    "Plaintext",
    "SqlKind",
    "TopicSchema",
    "add_tags",
]
