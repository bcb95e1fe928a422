"""Read models declared with ``ColumnUpserts``, folded straight from stored rows.

A page of events for such a model needs no envelopes, event objects or handler calls:
per row, the key and the source columns are read from the stored tuple and folded into
one running row per key (latest values replaced, counters added), in offset order, with
the same Python arithmetic the generated handlers use; only the final row of each key is
built and written. The result is the rows the handlers would have written.

The fold applies only where it is exact, and ``RowFold.fold`` returns None otherwise
(the collector then runs the handlers): every handler of the topic is a column upsert;
every event field it reads is a plain ``str``/``int``/``float``/``bool`` (optional or
not) of an event class without validators; the row's schema version is current (no
upcasting); and no aggregate of the collector is parked behind a dead letter.

Example::

    fold = RowFold.compile(model, topic, handlers)   # None: not eligible
    rows = fold.fold(page, current_rows) if fold else None
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

from ..codec import FIELDS_AT, META_NAMES, SCHEMA_VERSION_AT, TYPE_AT
from ..codec.codegen import has_validators, plain_type
from ..store.append import StoredRow
from ..topicdef import TopicDef
from .component import HandlerSpec, ReadModel
from .upserts import _META, RULE, UpsertRule

_Get = Callable[[StoredRow], Any]
_CONV: dict[Any, Callable[[Any], Any]] = {float: float, bool: bool}


class _NotExact(Exception):
    """A value the fold cannot reproduce exactly: the page goes through the handlers."""


def _getter(topic: TopicDef, event: type[BaseModel], source: str, used: set[int]) -> _Get | None:
    """How to read ``source`` (a log column or an event field) of a stored row exactly as
    the decoded envelope would give it; None if that is not exact. The row position it
    reads goes into ``used``."""
    if source in _META:
        i = META_NAMES.index(source)
        used.add(i)
        return lambda row: row[i]
    info = event.model_fields.get(source)
    plain = plain_type(info) if info is not None else None
    if info is None or plain is None:
        return None
    kind, nullable = plain
    i = FIELDS_AT + [c.name for c in topic.schema.columns].index(source)
    used.add(i)
    conv = _CONV.get(kind)
    if nullable:
        if conv is None:
            return lambda row: row[i]
        return lambda row: None if (v := row[i]) is None else conv(v)
    # NULL in a NOT NULL field: an older row; the decoder applies the field's default
    default = info.get_default(call_default_factory=True) if not info.is_required() else None
    missing = not info.is_required()

    def get(row: StoredRow) -> Any:
        v = row[i]
        if v is None:
            if not missing:
                raise _NotExact  # decoding fails: the handlers dead-letter it
            return default
        return v if conv is None else conv(v)

    return get


@dataclass(frozen=True, slots=True)
class _Plan:
    version: int
    key: _Get
    latest: tuple[tuple[str, _Get], ...]
    add: tuple[tuple[str, _Get | None, Any], ...]  # (column, source getter, constant)


class RowFold:
    """A read model's column upserts for one topic, compiled to fold stored rows."""

    def __init__(
        self,
        model: ReadModel[Any],
        plans: Mapping[str, _Plan],
        used: frozenset[int],
        names: Sequence[str],
    ) -> None:
        self.model, self.plans = model, dict(plans)
        #: The stored-row positions the fold reads (the rest may be None: ``narrow``).
        self.used = used | {TYPE_AT, SCHEMA_VERSION_AT}
        #: The stored columns' names, in row order.
        self.names = tuple(names)
        #: The names of the columns at ``used``: all a page needs to hold for the fold.
        self.columns = tuple(n for i, n in enumerate(self.names) if i in self.used)
        fields = model.row.model_fields
        self._empty = {
            n: f.get_default(call_default_factory=True) for n, f in fields.items() if n != model.key
        }

    @classmethod
    def compile(
        cls, model: ReadModel[Any], topic: TopicDef, handlers: Mapping[str, HandlerSpec]
    ) -> RowFold | None:
        """The fold of ``model``'s handlers of ``topic`` (event type -> spec), or None when
        one of them is not an exactly foldable column upsert."""
        plans: dict[str, _Plan] = {}
        used: set[int] = set()
        for etype, spec in handlers.items():
            rule: UpsertRule | None = getattr(spec.fn, RULE, None)
            event = topic.schema.event_types.get(etype)
            if rule is None or event is None or has_validators(event):
                return None
            key = _getter(topic, event, rule.key, used)
            latest = [(col, _getter(topic, event, src, used)) for col, src in rule.latest.items()]
            add = [
                (col, _getter(topic, event, src, used) if isinstance(src, str) else None, src)
                for col, src in rule.add.items()
            ]
            if key is None or any(g is None for _, g in latest):
                return None
            if any(g is None and isinstance(src, str) for _, g, src in add):
                return None
            plans[etype] = _Plan(
                topic.schema.versions[etype],
                key,
                tuple((c, g) for c, g in latest if g is not None),
                tuple(add),
            )
        names = topic.schema.arrow_schema.names
        return cls(model, plans, frozenset(used), names) if plans else None

    def narrow(self, page: pa.Table) -> list[StoredRow]:
        """The rows of an Arrow page (every stored column, or some of them by name: at
        least ``columns``) with only the values this fold reads (None elsewhere): a few
        columns leave Arrow instead of all of them."""
        used, n = self.used, len(page)
        at: Sequence[int] = range(page.num_columns)
        if page.num_columns != len(self.names):
            at = [self.names.index(name) for name in page.column_names]
        cols: list[Any] = [repeat(None, n) for _ in self.names]
        for i, c in zip(at, page.columns, strict=True):
            if i in used:
                cols[i] = c.to_pylist()
        return list(zip(*cols, strict=True))

    def keys(self, rows: Sequence[StoredRow]) -> list[Any] | None:
        """The row keys ``rows`` touch (None: not exact, use the handlers)."""
        plans, out = self.plans, set()
        try:
            for row in rows:
                plan = plans.get(row[TYPE_AT])
                if plan is not None:
                    out.add(plan.key(row))
        except _NotExact:
            return None
        return list(out)

    def fold(
        self, rows: Sequence[StoredRow], current: Mapping[Any, BaseModel]
    ) -> dict[Any, Any] | None:
        """The final row of every key ``rows`` touch, from the ``current`` rows (None:
        not exact, use the handlers)."""
        plans, empty, key_field = self.plans, self._empty, self.model.key
        acc: dict[Any, dict[str, Any]] = {}
        try:
            for row in rows:
                plan = plans.get(row[TYPE_AT])
                if plan is None:
                    continue  # a type this model does not handle
                if row[SCHEMA_VERSION_AT] != plan.version:
                    return None  # upcasting: the handlers' path
                k = plan.key(row)
                d = acc.get(k)
                if d is None:
                    cur = current.get(k)
                    d = acc[k] = dict(cur.__dict__) if cur is not None else {key_field: k, **empty}
                for col, get in plan.latest:
                    d[col] = get(row)
                for col, source, const in plan.add:
                    amount = const if source is None else source(row)
                    d[col] = d[col] + (amount or 0)
        except (_NotExact, TypeError, ArithmeticError):
            return None
        construct = self.model.row.model_construct
        return {k: construct(**d) for k, d in acc.items()}
