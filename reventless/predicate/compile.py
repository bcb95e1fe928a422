"""The compilers of a parsed predicate tree (``tree.py``): a SQLAlchemy clause with bound
parameters (``to_sql``), a ``pyarrow.compute`` expression (``to_arrow``), a Python row
function (``to_python``) and the value domain a broker can filter on (``domain``,
``BrokerFilter``). All follow SQL's three-valued logic (a comparison with NULL is
unknown; only rows where the predicate is TRUE pass) and the same LIKE rules (``%``,
``_``, backslash escapes, case-sensitive: SQLite compiles LIKE to GLOB, PostgreSQL
compares text with ``COLLATE "C"``). ``Predicate`` calls these."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from .tree import (
    And,
    Compare,
    Field,
    InList,
    IsNull,
    Kind,
    Like,
    Node,
    Not,
    Op,
    Or,
    Value,
)


def fields(node: Node) -> Iterable[Field]:
    if isinstance(node, And | Or):
        for p in node.parts:
            yield from fields(p)
    elif isinstance(node, Not):
        yield from fields(node.part)
    else:
        yield node.field


# -- SQL ------------------------------------------------------------------------------------

_SA_TYPES: dict[Kind, Callable[[], Any]] = {
    "int": sa.BigInteger,
    "float": sa.Double,
    "bool": sa.Boolean,
    "text": sa.Text,
    "time": sa.BigInteger,
}


def _bind(value: Value, kind: Kind) -> sa.BindParameter[Any]:
    t = sa.Double() if isinstance(value, float) else _SA_TYPES[kind]()
    return sa.bindparam(None, value, type_=t)


def _col(f: Field, dialect: str) -> sa.ColumnElement[Any]:
    c: sa.ColumnElement[Any] = sa.column(f.column)
    if f.kind == "text" and dialect == "postgresql":
        c = c.collate("C")  # byte order, as SQLite, Arrow and Python compare text
    return c


def to_sql(node: Node, dialect: str) -> sa.ColumnElement[bool]:
    if isinstance(node, And):
        return sa.and_(*(to_sql(p, dialect) for p in node.parts))
    if isinstance(node, Or):
        return sa.or_(*(to_sql(p, dialect) for p in node.parts))
    if isinstance(node, Not):
        return sa.not_(to_sql(node.part, dialect))
    f = node.field
    if isinstance(node, IsNull):
        return sa.column(f.column).is_(None)
    if f.each:
        return _sql_each(node, dialect)
    return _sql_leaf(node, _col(f, dialect), dialect)


def _sql_each(node: Compare | InList | Like, dialect: str) -> sa.ColumnElement[bool]:
    """``EXISTS`` an element of the JSON list column for which the leaf holds."""
    stored: sa.ColumnClause[Any] = sa.column(node.field.column)
    if dialect == "postgresql":
        items = sa.func.jsonb_array_elements_text(sa.cast(stored, JSONB)).table_valued("value")
        value: sa.ColumnElement[Any] = items.c.value.collate("C")
    else:
        items = sa.func.json_each(stored).table_valued("value")
        value = items.c.value
    return sa.exists(
        sa.select(sa.literal(1)).select_from(items).where(_sql_leaf(node, value, dialect))
    )


def _sql_leaf(
    node: Compare | InList | Like, col: sa.ColumnElement[Any], dialect: str
) -> sa.ColumnElement[bool]:
    f = node.field
    if isinstance(node, Compare):
        return col.op(node.op, is_comparison=True)(_bind(node.value, f.kind))
    if isinstance(node, InList):
        return col.in_([_bind(v, f.kind) for v in node.values])
    if dialect == "sqlite":  # SQLite's LIKE ignores case: GLOB is exact
        return col.op("GLOB", is_comparison=True)(_bind(_glob(node.pattern), "text"))
    return col.like(_bind(node.pattern, "text"))


def _like_tokens(pattern: str) -> Iterable[tuple[str, str]]:
    """(kind, char) with kind ``any``/``one``/``lit``."""
    it = iter(pattern)
    for ch in it:
        if ch == "\\":
            yield "lit", next(it)
        elif ch == "%":
            yield "any", ch
        elif ch == "_":
            yield "one", ch
        else:
            yield "lit", ch


def _glob(pattern: str) -> str:
    out = []
    for kind, ch in _like_tokens(pattern):
        if kind == "any":
            out.append("*")
        elif kind == "one":
            out.append("?")
        else:
            out.append(f"[{ch}]" if ch in "*?[" else ch)
    return "".join(out)


def like_regex(pattern: str) -> re.Pattern[str]:
    """The Python regex (full match) of a LIKE pattern."""
    parts = []
    for kind, ch in _like_tokens(pattern):
        parts.append(".*" if kind == "any" else "." if kind == "one" else re.escape(ch))
    return re.compile("".join(parts), re.DOTALL)


# -- Arrow ----------------------------------------------------------------------------------

_TS = pa.timestamp("us", tz="UTC")
# A null boolean for pc.if_else, built when first needed: pa.scalar(None) imports pandas
# (when installed) to recognise its NA, ~150 ms of `import reventless`.
_NULL_BOOL: list[pa.Scalar] = []


def _scalar(value: Value, kind: Kind) -> pa.Scalar:
    if kind == "time":
        return pa.scalar(value, _TS)
    if isinstance(value, bool):
        return pa.scalar(value, pa.bool_())
    if isinstance(value, int):
        return pa.scalar(value, pa.int64())
    if isinstance(value, float):
        return pa.scalar(value, pa.float64())
    return pa.scalar(value, pa.string())


def to_arrow(node: Node) -> pc.Expression:
    if isinstance(node, And | Or):
        out = to_arrow(node.parts[0])
        for p in node.parts[1:]:
            out = (out & to_arrow(p)) if isinstance(node, And) else (out | to_arrow(p))
        return out
    if isinstance(node, Not):
        return ~to_arrow(node.part)
    f = node.field
    col = pc.field(f.column)
    if isinstance(node, IsNull):
        return col.is_null()
    if f.each:  # a boolean column ``prepare_arrow`` adds
        return pc.field(each_column(node))
    if isinstance(node, Compare):
        v = _scalar(node.value, f.kind)
        ops = {
            "=": col == v,
            "<>": col != v,
            "<": col < v,
            "<=": col <= v,
            ">": col > v,
            ">=": col >= v,
        }
        return ops[node.op]
    if isinstance(node, InList):
        # is_in says false for a null input; SQL says unknown (matters under NOT)
        values = pa.array([_scalar(v, f.kind).as_py() for v in node.values], _scalar_type(node))
        if not _NULL_BOOL:
            _NULL_BOOL.append(pa.scalar(None, pa.bool_()))
        return pc.if_else(col.is_valid(), col.isin(values), _NULL_BOOL[0])
    # The same regex as the Python filter, anchored (RE2): Arrow's own LIKE mishandles an
    # escaped backslash at the end of a pattern.
    return pc.match_substring_regex(col, f"^(?s:{like_regex(node.pattern).pattern})$")


def each_column(node: Compare | InList | Like) -> str:
    """The name of the boolean column holding ``node`` on a list column, per row."""
    return f"__rv_each_{abs(hash(node)):x}"


def each_leaves(node: Node) -> Iterable[Compare | InList | Like]:
    """The leaves of ``node`` on list columns."""
    if isinstance(node, And | Or):
        for p in node.parts:
            yield from each_leaves(p)
    elif isinstance(node, Not):
        yield from each_leaves(node.part)
    elif not isinstance(node, IsNull) and node.field.each:
        yield node


def prepare_arrow(node: Node, data: pa.Table) -> pa.Table:
    """``data`` with the boolean columns ``to_arrow`` reads for leaves on list columns:
    true where at least one element of the row's list holds (false for an empty list)."""
    for leaf in dict.fromkeys(each_leaves(node)):
        lists = data.column(leaf.field.column).combine_chunks()
        flat = pc.list_flatten(lists)
        if isinstance(leaf, Compare):
            ops = {
                "=": pc.equal,
                "<>": pc.not_equal,
                "<": pc.less,
                "<=": pc.less_equal,
                ">": pc.greater,
                ">=": pc.greater_equal,
            }
            hit = ops[leaf.op](flat, pa.scalar(leaf.value, pa.string()))
        elif isinstance(leaf, InList):
            hit = pc.is_in(flat, pa.array([str(v) for v in leaf.values], pa.string()))
        else:
            hit = pc.match_substring_regex(flat, f"^(?s:{like_regex(leaf.pattern).pattern})$")
        out = np.zeros(data.num_rows, dtype=bool)
        parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        out[parents[hit.fill_null(False).to_numpy(zero_copy_only=False)]] = True
        data = data.append_column(each_column(leaf), pa.array(out, pa.bool_()))
    return data


def _scalar_type(node: InList) -> pa.DataType:
    kinds = {type(v) for v in node.values}
    if node.field.kind == "time":
        return _TS
    if float in kinds:
        return pa.float64()
    return _scalar(node.values[0], node.field.kind).type


# -- Python ---------------------------------------------------------------------------------

_Tri = Callable[[Sequence[Any]], bool | None]
_CMP: dict[Op, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def to_python(node: Node, index: Mapping[str, int]) -> _Tri:
    if isinstance(node, And | Or):
        parts = [to_python(p, index) for p in node.parts]
        stop = isinstance(node, Or)  # the value that decides: TRUE for OR, FALSE for AND

        def combine(row: Sequence[Any]) -> bool | None:
            unknown = False
            for p in parts:
                v = p(row)
                if v is None:
                    unknown = True
                elif v is stop:
                    return stop
            return None if unknown else not stop

        return combine
    if isinstance(node, Not):
        inner = to_python(node.part, index)

        def negate(row: Sequence[Any]) -> bool | None:
            v = inner(row)
            return None if v is None else not v

        return negate
    i = index[node.field.column]
    if isinstance(node, IsNull):
        return lambda row: row[i] is None
    if node.field.each:
        one = _py_leaf(node, 0)

        def each(row: Sequence[Any]) -> bool:
            items = row[i]
            items = json.loads(items) if isinstance(items, str) else items or ()
            return any(one((x,)) for x in items)

        return each
    return _py_leaf(node, i)


def _py_leaf(node: Compare | InList | Like, i: int) -> _Tri:
    if isinstance(node, Compare):
        cmp, value = _CMP[node.op], node.value
        return lambda row: None if row[i] is None else cmp(row[i], value)
    if isinstance(node, InList):
        values = node.values
        return lambda row: None if row[i] is None else row[i] in values
    rx = like_regex(node.pattern)
    return lambda row: None if row[i] is None else rx.fullmatch(row[i]) is not None


def domain(node: Node, column: str) -> frozenset[Value] | None:
    """Values of ``column`` a row can have if ``node`` is true (None: any)."""
    if isinstance(node, Compare) and node.field.column == column and node.op == "=":
        return frozenset([node.value])
    if isinstance(node, InList) and node.field.column == column:
        return frozenset(node.values)
    if isinstance(node, And):
        out: frozenset[Value] | None = None
        for p in node.parts:
            d = domain(p, column)
            if d is not None:
                out = d if out is None else out & d
        return out
    if isinstance(node, Or):
        doms = [domain(p, column) for p in node.parts]
        if any(d is None for d in doms):
            return None
        return frozenset().union(*doms)  # type: ignore[arg-type]
    return None


@dataclass(frozen=True, slots=True)
class BrokerFilter:
    """What a broker can filter on for a predicate: the event types and partitions it
    restricts to (None: not restricted). Only an over-approximation: receivers still
    apply the full predicate."""

    event_types: frozenset[str] | None
    partitions: frozenset[int] | None

    def nats_subjects(self, topic: str) -> list[str]:
        """JetStream filter subjects (``rv.<topic>.<partition>``; the stream's subjects)."""
        if self.partitions is None:
            return [f"rv.{topic}.*"]
        return [f"rv.{topic}.{p}" for p in sorted(self.partitions)]

    def sns_filter_policy(self, attribute: str = "rv-types") -> dict[str, list[str]] | None:
        """An SNS subscription filter policy on the message attribute holding the event
        type (None when the predicate does not restrict the type)."""
        if self.event_types is None:
            return None
        return {attribute: sorted(self.event_types)}
