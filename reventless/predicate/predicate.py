"""SQL-style WHERE predicates over a topic's columns, parsed once and compiled four ways.

``Predicate.parse(text, schema)`` reads the text with sqlglot, turns it into a small tree
of our own nodes (``Compare``, ``InList``, ``Like``, ``IsNull``, ``And``, ``Or``, ``Not``)
and checks every column name and literal type against the topic. The tree then compiles to

- ``sql()``: a SQLAlchemy clause with bound parameters only (store reads, pushdown),
- ``arrow()``: a ``pyarrow.compute`` expression (filter record batches),
- ``row_filter(names)``: a Python function over a stored row (live deliveries),
- ``broker_filter()``: the part a broker can filter on (event types, partitions).

All follow SQL's three-valued logic (a comparison with NULL is unknown; only rows
where the predicate is TRUE pass) and the same LIKE rules (``%``, ``_``, backslash escapes,
case-sensitive: SQLite compiles LIKE to GLOB, PostgreSQL compares text with ``COLLATE "C"``).

Column names a predicate may use (see ``COLUMN_ALIASES``): the topic's field columns, the
metadata columns by their stored names (``_type``, ``_offset``...) or their short names
(``type``, ``key``, ``offset``, ``version``, ``produced_at``, ``tenant``, ``user``...).
A field column with the same name as a short name wins; the ``_`` name always reaches the
metadata. Only integer, float, boolean and string columns and ``produced_at`` (compared with
an ISO-8601 text literal) are filterable, and ``tag`` on a topic with tags (true when one of
the event's tags satisfies the term: ``tag = 'course:c1'``, ``tag LIKE 'course:%'``).

Example::

    p = Predicate.parse("type = 'OrderPlaced' AND total > 100", topic.schema)
    batch.filter(p.arrow())
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from ..codec import TopicSchema
from .compile import (
    BrokerFilter,
    domain,
    each_column,
    each_leaves,
    fields,
    prepare_arrow,
    to_arrow,
    to_python,
    to_sql,
)
from .parse import parse_node
from .tree import Node


class Predicate:
    """A validated predicate over one topic (``parse``), compiled on demand."""

    def __init__(self, text: str, schema: TopicSchema, node: Node) -> None:
        self.text, self.schema, self.node = text, schema, node
        self._arrow: tuple[pc.Expression, list[str]] | None = None

    @classmethod
    def parse(cls, text: str, schema: TopicSchema) -> Predicate:
        """Parse and validate ``text`` (raises ``PredicateError``)."""
        return cls(text, schema, parse_node(text, schema))

    def __repr__(self) -> str:
        return f"Predicate({self.text!r})"

    @property
    def columns(self) -> frozenset[str]:
        """Stored columns the predicate reads."""
        return frozenset(f.column for f in fields(self.node))

    def sql(self, dialect: str = "sqlite") -> sa.ColumnElement[bool]:
        """A SQLAlchemy clause over the topic table's columns; values are bound parameters."""
        return to_sql(self.node, dialect)

    def arrow(self) -> pc.Expression:
        """A ``pyarrow.compute`` expression over the topic's Arrow columns (after
        ``prepare_arrow`` when the predicate tests tags)."""
        return to_arrow(self.node)

    def prepare_arrow(self, data: pa.Table) -> pa.Table:
        """``data`` with the helper columns ``arrow()`` reads for ``tag`` terms (a list
        column cannot be tested per element by an expression); unchanged without them."""
        return prepare_arrow(self.node, data)

    def filter_arrow(self, data: pa.Table) -> pa.Table:
        """The rows of ``data`` the predicate holds for, with ``data``'s columns."""
        if self._arrow is None:
            helpers = [each_column(leaf) for leaf in dict.fromkeys(each_leaves(self.node))]
            self._arrow = (to_arrow(self.node), helpers)
        expression, helpers = self._arrow
        if not helpers:
            return data.filter(expression)
        return prepare_arrow(self.node, data).filter(expression).drop_columns(helpers)

    def row_filter(self, names: Sequence[str]) -> Callable[[Sequence[Any]], bool]:
        """A function telling whether a stored row (values in ``names`` order) passes."""
        index = {n: i for i, n in enumerate(names)}
        fn = to_python(self.node, index)
        return lambda row: fn(row) is True

    def matches(self, row: Mapping[str, Any]) -> bool:
        """Whether a row given as ``{stored column: SQL value}`` passes."""
        names = list(row)
        return self.row_filter(names)(list(row.values()))

    def broker_filter(self) -> BrokerFilter:
        """The event types / partitions this predicate restricts to."""
        return BrokerFilter(domain(self.node, "_type"), domain(self.node, "_partition"))  # type: ignore[arg-type]
