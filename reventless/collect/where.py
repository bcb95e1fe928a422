"""Predicate filters of collectors: ``where=`` on a component, compiled per topic it reads.

A component declared with ``where="type = 'OrderPlaced' AND total > 100"`` only sees the
events the predicate holds for; the others still move its checkpoint. The predicate is
parsed once per topic when the App builds (``compile_where``; a malformed predicate or
an unknown column raises ``PredicateError`` before anything is created) and evaluated by
pushdown: the store read adds the SQL clause (bound parameters only), live broker batches
are filtered with the pyarrow expression before rows are built, and the event types it
allows narrow the component's broker channel (``event_types``: SNS filter policies).

Example::

    big = rv.ReadModel("big_orders", row=OrderRow, key="id", where="total > 100")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..predicate import Predicate, PredicateError
from ..topicdef import TopicDef
from .component import Component

if TYPE_CHECKING:
    import sqlalchemy as sa


class TopicFilter:
    """A component's predicate compiled for one topic: SQL clause, Arrow expression and
    Python row filter (for rows handed to ``Collector.deliver`` directly)."""

    def __init__(self, topic: TopicDef, predicate: Predicate) -> None:
        self.topic = topic.name
        self.predicate = predicate
        self.expression: pc.Expression = predicate.arrow()
        schema = topic.schema.arrow_schema
        self._fields = {f.name: f for f in schema}
        self._keep: Callable[[Sequence[Any]], bool] = predicate.row_filter(schema.names)
        self._clauses: dict[str, sa.ColumnElement[bool]] = {}

    def clause(self, dialect: str) -> sa.ColumnElement[bool]:
        """The SQLAlchemy clause for ``dialect`` (``sqlite`` or ``postgresql``)."""
        c = self._clauses.get(dialect)
        if c is None:
            c = self._clauses[dialect] = self.predicate.sql(dialect)
        return c

    def table(self, data: pa.Table) -> pa.Table:
        """The rows of a decoded broker batch the predicate holds for."""
        for name in self.predicate.columns - set(data.schema.names):
            # a batch from an older writer may lack a newer nullable column: it is NULL
            f = self._fields[name]
            data = data.append_column(f, pa.nulls(data.num_rows, f.type))
        return self.predicate.filter_arrow(data)

    def rows(self, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """The stored rows the predicate holds for."""
        keep = self._keep
        return [r for r in rows if keep(r)]

    def event_types(self) -> frozenset[str] | None:
        """The event types the predicate restricts to (None: any)."""
        return self.predicate.broker_filter().event_types


def compile_where(component: Component, topics: Mapping[str, TopicDef]) -> dict[str, TopicFilter]:
    """``component.where`` parsed against each topic it reads (empty without ``where``).

    Raises ``PredicateError`` naming the component and topic; nothing is built yet."""
    if component.where is None:
        return {}
    out: dict[str, TopicFilter] = {}
    for name, topic in topics.items():
        try:
            predicate = Predicate.parse(component.where, topic.schema)
        except PredicateError as exc:
            raise PredicateError(f"{component.name} (topic {name!r}): {exc}") from None
        out[name] = TopicFilter(topic, predicate)
    return out


def wanted_types(
    topics: Mapping[str, TopicDef],
    dispatch: Mapping[str, Mapping[str, object]],
    filters: Mapping[str, TopicFilter],
) -> dict[str, frozenset[str]]:
    """Per topic of ``dispatch``, the event types a component needs when that is fewer
    than all of the topic's types (its handlers', narrowed by its ``where=``); topics it
    needs whole (or schema topics) are left out. A broker that filters by type (SNS
    filter policies) subscribes with these."""
    out = {}
    for name, handlers in dispatch.items():
        every = frozenset(topics[name].schema.event_types)
        handled = None if "*" in handlers else frozenset(handlers)
        types = narrow(handled, filters, name)
        if types is not None and every and types < every:
            out[name] = types
    return out


def narrow(
    handled: frozenset[str] | None, filters: Mapping[str, TopicFilter], topic: str
) -> frozenset[str] | None:
    """The event types a component needs from ``topic``: those it handles (None: every
    row) that its predicate allows."""
    f = filters.get(topic)
    allowed = f.event_types() if f is not None else None
    if allowed is None:
        return handled
    return allowed if handled is None else handled & allowed
