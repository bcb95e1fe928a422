"""Spark's pushed filters as reventless predicates (``pyspark.sql.datasource.Filter`` ->
``reventless.predicate`` nodes), so the store evaluates them in SQL.

Only filters whose meaning is exactly the store's are taken: comparisons, ``IN``,
``IS [NOT] NULL``, prefix/suffix/substring matches and ``NOT`` of those, on a top-level
integer, float, boolean or string column that a predicate may read (metadata columns such
as ``_type``, ``_offset``, ``_partition``, and unsealed field columns) and on
``_produced_at`` against a TIMESTAMP; everything else stays with Spark. ``_offset`` and
``_partition`` bounds also prune the planned ranges.

Example::

    node = to_node(EqualTo(("_type",), "OrderPlaced"), columns)   # None: Spark keeps it
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from ..predicate import Compare, Field, InList, Like, Node, Op, Value
from ..predicate import IsNull as NullNode
from ..predicate import Not as NotNode

__all__ = ["Bounds", "bounds_of", "to_node"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OPS: Mapping[type[Filter], Op] = {
    EqualTo: "=",
    EqualNullSafe: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_LIKES: Mapping[type[Filter], tuple[str, str]] = {
    StringStartsWith: ("", "%"),
    StringEndsWith: ("%", ""),
    StringContains: ("%", "%"),
}


def _value(f: Field, v: object) -> Value | None:
    """``v`` as a literal of ``f``'s kind, or None when the store would compare it
    differently from Spark."""
    if f.kind == "bool":
        return v if isinstance(v, bool) else None
    if isinstance(v, bool):
        return None
    if f.kind == "int":
        return v if isinstance(v, int) and -(2**63) <= v < 2**63 else None
    if f.kind == "float":
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None
    if f.kind == "text":
        return v if isinstance(v, str) else None
    if isinstance(v, datetime) and v.tzinfo is not None:  # a TIMESTAMP (NTZ ones are naive)
        delta = v - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def to_node(flt: Filter, columns: Mapping[str, Field]) -> Node | None:
    """The predicate node of one pushed filter, or None when it cannot be pushed."""
    if isinstance(flt, Not):
        inner = to_node(flt.child, columns)
        return None if inner is None else NotNode(inner)
    attr: tuple[str, ...] = getattr(flt, "attribute", ())
    if len(attr) != 1:
        return None  # a nested field (a.b): Spark evaluates it
    f = columns.get(attr[0])
    if f is None or f.each:
        return None
    if isinstance(flt, IsNull | IsNotNull):
        node: Node = NullNode(f)
        return node if isinstance(flt, IsNull) else NotNode(node)
    op = _OPS.get(type(flt))
    if op is not None:
        raw = flt.value  # type: ignore[attr-defined]
        if raw is None:
            return NullNode(f) if isinstance(flt, EqualNullSafe) else None
        value = _value(f, raw)
        if value is None or (f.kind == "bool" and op != "="):
            return None
        return Compare(f, op, value)
    if isinstance(flt, In):
        values = [_value(f, v) for v in flt.value]
        if not values or any(v is None for v in values):
            return None
        return InList(f, tuple(v for v in values if v is not None))
    like = _LIKES.get(type(flt))
    if like is not None and f.kind == "text" and isinstance(flt.value, str):  # type: ignore[attr-defined]
        before, after = like
        return Like(f, before + _escape(flt.value) + after)  # type: ignore[attr-defined]
    return None


@dataclass(frozen=True, slots=True)
class Bounds:
    """What pushed filters say about offsets and partitions: ``lo <= _offset <= hi`` and
    the partitions kept (None: all)."""

    lo: int = 1
    hi: int = 2**63 - 1
    partitions: frozenset[int] | None = None


def bounds_of(nodes: list[Node]) -> Bounds:
    """The offset range and partitions the AND of ``nodes`` keeps (for planning)."""
    lo, hi, parts = 1, 2**63 - 1, None
    for n in nodes:
        if isinstance(n, Compare) and n.field.column == "_offset" and isinstance(n.value, int):
            v = n.value
            if n.op == "=":
                lo, hi = max(lo, v), min(hi, v)
            elif n.op in (">", ">="):
                lo = max(lo, v + (n.op == ">"))
            elif n.op in ("<", "<="):
                hi = min(hi, v - (n.op == "<"))
        elif isinstance(n, Compare | InList) and n.field.column == "_partition":
            if isinstance(n, Compare) and n.op != "=":
                continue
            keep = {int(v) for v in ((n.value,) if isinstance(n, Compare) else n.values)}
            parts = keep if parts is None else parts & keep
    return Bounds(lo, hi, None if parts is None else frozenset(parts))
