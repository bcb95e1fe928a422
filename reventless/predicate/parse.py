"""SQL-style WHERE text -> a checked predicate tree (``tree.py``).

``parse_node(text, schema)`` reads the text with sqlglot (``_sql.py``, imported on the
first parse: sqlglot takes a tenth of ``import reventless``), turns it into our own nodes and
checks every column name and literal type against the topic (``PredicateError``
otherwise). On a topic with tags, ``tag`` (or ``_tags``) stands for any one of an event's
tags: ``tag = 'course:c1'``, ``tag IN (...)``, ``tag LIKE 'course:%'`` hold when one tag does.
Column names a predicate may use are ``filter_columns(schema)``: the topic's
field columns, the metadata columns by their stored names (``_type``, ``_offset``...) or
their short names (``COLUMN_ALIASES``). A field column with the same name as a short name
wins; the ``_`` name always reaches the metadata. Only integer, float, boolean and string
columns and ``produced_at`` (compared with an ISO-8601 text literal) are filterable.

Example::

    node = parse_node("type = 'OrderPlaced' AND total > 100", topic.schema)
"""

from __future__ import annotations

import pyarrow as pa

from ..codec import META_FIELDS, TopicSchema
from ..errors import PredicateError
from .tree import COLUMN_ALIASES, TAG_NAME, TAGS_COLUMN, Field, Kind, Node

MAX_LENGTH = 4096
MAX_NODES = 512


def filter_columns(schema: TopicSchema) -> dict[str, Field]:
    """Every name a predicate on ``schema`` may use, resolved to its stored column."""
    out: dict[str, Field] = {}
    for f in META_FIELDS:
        kind = _kind_of(f.type)
        if kind is not None:
            out[f.name] = Field(f.name, f.name, kind)
    for alias, column in COLUMN_ALIASES.items():
        out[alias] = Field(alias, column, out[column].kind)
    for c in schema.columns:
        kind = _kind_of(c.arrow_type) if c.sql_kind != "json" else None
        if c.name == TAGS_COLUMN:
            tags = Field(TAG_NAME, TAGS_COLUMN, "text", each=True)
            out.setdefault(TAG_NAME, tags)  # a field named ``tag`` wins
            out[TAGS_COLUMN] = Field(TAGS_COLUMN, TAGS_COLUMN, "text", each=True)
        elif kind is not None and kind != "time" and c.personal is None:
            out[c.name] = Field(c.name, c.name, kind)
        else:
            out.pop(c.name, None)  # a field shadows a short name even if not filterable
    return out


def _kind_of(t: pa.DataType) -> Kind | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_timestamp(t):
        return "time"
    return None


def parse_node(text: str, schema: TopicSchema) -> Node:
    """Parse and validate ``text`` against ``schema`` (raises ``PredicateError``)."""
    if not isinstance(text, str) or not text.strip():
        raise PredicateError("a predicate must be a non-empty string")
    if len(text) > MAX_LENGTH:
        raise PredicateError(f"predicate longer than {MAX_LENGTH} characters")
    from ._sql import read  # (sqlglot: on the first parse, see above)

    return read(text, schema, filter_columns(schema), MAX_NODES)
