"""Read-model handlers declared as pure column upserts (latest value per key, counters).

``ColumnUpserts`` registers ordinary handlers on a ReadModel, so the live collector runs
them like any other; the declaration they keep lets a Spark rebuild compile the same
model into one SQL aggregation (no Python per event). A source is an event field name
or one of the log columns ``_aggregate_id``, ``_offset``, ``_version``, ``_type``;
counters add a field or a constant.

Example::

    sales = rv.ReadModel("sku_sales", row=SkuSales, key="sku")
    upserts = rv.ColumnUpserts(sales, key="sku")          # rows keyed by the event's sku
    upserts.on(OrderPlaced, latest={"last": "_aggregate_id"}, add={"orders": 1, "units": "qty"})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..errors import SpecError
from ..spec import Envelope, Event
from .component import ReadModel, Upsert

#: Attribute of a key function naming the log column its key is read from (a Spark
#: rebuild groups by that column instead of calling the function).
KEY_COLUMN = "__rv_key_column__"
#: Attribute of a generated handler holding its ``UpsertRule``.
RULE = "__rv_upsert_rule__"
_META = {
    "_aggregate_id": "aggregate_id",
    "_offset": "offset",
    "_version": "version",
    "_type": "type",
}


@dataclass(frozen=True)
class UpsertRule:
    """What one generated handler does: row key source, latest-value and counter columns."""

    key: str  # log column of the row key
    latest: Mapping[str, str]
    add: Mapping[str, str | int | float]


class FieldKey:
    """Key function: the value of one log column of the event (hashable, picklable)."""

    def __init__(self, column: str) -> None:
        self.column = column
        setattr(self, KEY_COLUMN, column)

    def __call__(self, ev: Envelope[Any]) -> Any:
        return value_of(ev, self.column)


def value_of(ev: Envelope[Any], column: str) -> Any:
    """The value of log column ``column`` for ``ev`` (an event field or a meta column)."""
    meta = _META.get(column)
    return getattr(ev, meta) if meta else getattr(ev.event, column)


class ColumnUpserts:
    """Declare a read model's handlers as column upserts (see the module docstring).

    ``key``: the log column holding the row key (default ``_aggregate_id``). Every row
    column other than the key needs a default (the row a key's first event starts from).
    """

    def __init__(self, model: ReadModel[Any], *, key: str = "_aggregate_id") -> None:
        self.model, self.key = model, key
        fields = model.row.model_fields
        missing = [n for n, f in fields.items() if n != model.key and f.is_required()]
        if missing:
            raise SpecError(f"{model.name}: column upserts need defaults for {missing}")
        self._empty = {
            n: f.get_default(call_default_factory=True) for n, f in fields.items() if n != model.key
        }

    def on(
        self,
        *events: type[Event],
        latest: Mapping[str, str] | None = None,
        add: Mapping[str, str | int | float] | None = None,
        key: str | None = None,
    ) -> None:
        """For ``events``: set ``latest`` columns to a source's value, add to ``add``
        columns a source's value (or a constant)."""
        latest, add = dict(latest or {}), dict(add or {})
        cols = self.model.row.model_fields
        for col in [*latest, *add]:
            if col not in cols or col == self.model.key:
                raise SpecError(f"{self.model.name}: {col!r} is not a non-key column of the row")
        for ev in events:
            for src in [*latest.values(), *(s for s in add.values() if isinstance(s, str))]:
                if src not in _META and src not in ev.model_fields:
                    raise SpecError(f"{self.model.name}: {ev.__name__} has no field {src!r}")
        rule = UpsertRule(key or self.key, latest, add)
        self.model.on(*events, key=FieldKey(rule.key))(self._handler(rule))

    def _handler(self, rule: UpsertRule) -> Any:
        row_type, key_field, empty = self.model.row, self.model.key, self._empty

        def upsert(ev: Envelope[Any], current: BaseModel | None) -> Upsert[Any]:
            if current is None:
                current = row_type.model_construct(**{key_field: value_of(ev, rule.key)}, **empty)
            changes = {col: value_of(ev, src) for col, src in rule.latest.items()}
            for col, src in rule.add.items():
                amount = src if not isinstance(src, str) else value_of(ev, src)
                changes[col] = getattr(current, col) + (amount or 0)
            return Upsert(current.model_copy(update=changes))

        setattr(upsert, RULE, rule)
        upsert.__name__ = f"{self.model.name}_upsert"
        return upsert
