"""SQL-style WHERE predicates over a topic's columns, parsed once and compiled three ways.

``Predicate.parse(text, schema)`` reads the text with sqlglot, turns it into a small tree
of our own nodes (``Compare``, ``InList``, ``Like``, ``IsNull``, ``And``, ``Or``, ``Not``)
and checks every column name and literal type against the topic. The tree then compiles to

- ``sql()``: a SQLAlchemy clause with bound parameters only (store reads, pushdown),
- ``arrow()``: a ``pyarrow.compute`` expression (filter record batches),
- ``row_filter(names)``: a Python function over a stored row (live deliveries),
- ``broker_filter()``: the part a broker can filter on (event types, partitions).

All three follow SQL's three-valued logic (a comparison with NULL is unknown; only rows
where the predicate is TRUE pass) and the same LIKE rules (``%``, ``_``, backslash escapes,
case-sensitive: SQLite compiles LIKE to GLOB, PostgreSQL compares text with ``COLLATE "C"``).

Column names a predicate may use (see ``COLUMN_ALIASES``): the topic's field columns, the
metadata columns by their stored names (``_type``, ``_offset``...) or their short names
(``type``, ``key``, ``offset``, ``version``, ``produced_at``, ``tenant``, ``user``...).
A field column with the same name as a short name wins; the ``_`` name always reaches the
metadata. Only integer, float, boolean and string columns and ``produced_at`` (compared with
an ISO-8601 text literal) are filterable.

Example::

    p = Predicate.parse("type = 'OrderPlaced' AND total > 100", topic.schema)
    batch.filter(p.arrow())
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
import sqlglot
from sqlglot import exp

from ..codec import META_FIELDS, TopicSchema
from ..errors import ReventlessError

Kind = Literal["int", "float", "bool", "text", "time"]
Op = Literal["=", "<>", "<", "<=", ">", ">="]
Value = int | float | bool | str

MAX_LENGTH = 4096
MAX_NODES = 512

#: Short names of the metadata columns (user-facing name -> stored column).
COLUMN_ALIASES: Mapping[str, str] = {
    "offset": "_offset",
    "type": "_type",
    "key": "_aggregate_id",
    "aggregate_id": "_aggregate_id",
    "version": "_version",
    "produced_at": "_produced_at",
    "schema_version": "_schema_version",
    "msg_id": "_msg_id",
    "correlation_id": "_correlation_id",
    "causation_id": "_causation_id",
    "user": "_user",
    "service": "_service",
    "ip": "_ip",
    "tenant": "_tenant",
    "partition": "_partition",
}


class PredicateError(ReventlessError):
    """A predicate is malformed, names an unknown column or compares the wrong types."""


@dataclass(frozen=True, slots=True)
class Field:
    """A resolved column: the name the user wrote, the stored column, its filter kind."""

    name: str
    column: str
    kind: Kind


@dataclass(frozen=True, slots=True)
class Compare:
    """``field op value``."""

    field: Field
    op: Op
    value: Value


@dataclass(frozen=True, slots=True)
class InList:
    """``field IN (values...)``."""

    field: Field
    values: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class Like:
    """``field LIKE pattern`` (``%`` any run, ``_`` one character, ``\\`` escapes)."""

    field: Field
    pattern: str


@dataclass(frozen=True, slots=True)
class IsNull:
    """``field IS NULL``."""

    field: Field


@dataclass(frozen=True, slots=True)
class And:
    """All parts are true."""

    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Any part is true."""

    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """The part is false."""

    part: Node


Node = Compare | InList | Like | IsNull | And | Or | Not

_OPS: dict[type[exp.Expression], Op] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIP: dict[Op, Op] = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


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
        if kind is not None and kind != "time":
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


class _Parser:
    def __init__(self, schema: TopicSchema) -> None:
        self.schema = schema
        self.columns = filter_columns(schema)
        self.nodes = 0

    def node(self, e: exp.Expression) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise PredicateError(f"predicate is too complex (more than {MAX_NODES} terms)")
        if isinstance(e, exp.Paren):
            return self.node(e.this)
        if isinstance(e, exp.And):
            return And((self.node(e.this), self.node(e.expression)))
        if isinstance(e, exp.Or):
            return Or((self.node(e.this), self.node(e.expression)))
        if isinstance(e, exp.Not):
            return Not(self.node(e.this))
        if type(e) in _OPS:
            return self.compare(e, _OPS[type(e)])
        if isinstance(e, exp.In):
            if e.args.get("query") is not None or e.args.get("unnest") is not None:
                raise PredicateError("IN takes a list of literals, not a subquery")
            f = self.field(e.this)
            values = tuple(self.literal(v, f) for v in e.expressions)
            if not values:
                raise PredicateError("IN needs at least one value")
            return InList(f, values)
        if isinstance(e, exp.Like):
            if e.args.get("escape") is not None:
                raise PredicateError("LIKE ... ESCAPE is not supported (use backslash escapes)")
            f = self.field(e.this)
            if f.kind != "text":
                raise PredicateError(f"LIKE needs a text column, {f.name!r} is {f.kind}")
            pattern = self.literal(e.expression, f)
            assert isinstance(pattern, str)
            if (len(pattern) - len(pattern.rstrip("\\"))) % 2 == 1:
                raise PredicateError(f"LIKE pattern {pattern!r} ends with an escape character")
            like: Node = Like(f, pattern)
            return Not(like) if e.args.get("negate") else like
        if isinstance(e, exp.Is):
            if not isinstance(e.expression, exp.Null):
                raise PredicateError("IS takes NULL (write `col IS NULL` or `col IS NOT NULL`)")
            return IsNull(self.field(e.this))
        if isinstance(e, exp.Between):
            f = self.field(e.this)
            low, high = self.literal(e.args["low"], f), self.literal(e.args["high"], f)
            self.ordered(f)
            return And((Compare(f, ">=", low), Compare(f, "<=", high)))
        raise PredicateError(f"unsupported expression {e.sql()!r} ({type(e).__name__})")

    def compare(self, e: exp.Expression, op: Op) -> Node:
        left, right = e.this, e.expression
        if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
            left, right, op = right, left, _FLIP[op]
        f = self.field(left)
        if isinstance(right, exp.Null):
            raise PredicateError(f"comparing with NULL is never true: use `{f.name} IS NULL`")
        value = self.literal(right, f)
        if op not in ("=", "<>"):
            self.ordered(f)
        return Compare(f, op, value)

    def ordered(self, f: Field) -> None:
        if f.kind == "bool":
            raise PredicateError(f"{f.name!r} is boolean: only = and <> compare it")

    def field(self, e: exp.Expression) -> Field:
        if not isinstance(e, exp.Column) or e.args.get("table") is not None:
            raise PredicateError(f"expected a column name, got {e.sql()!r}")
        name = e.name
        f = self.columns.get(name)
        if f is None:
            known = ", ".join(sorted(n for n in self.columns if not n.startswith("_")))
            raise PredicateError(
                f"topic {self.schema.name!r} has no filterable column {name!r} (known: {known})"
            )
        return f

    def literal(self, e: exp.Expression, f: Field) -> Value:
        neg = False
        if isinstance(e, exp.Neg):
            neg, e = True, e.this
        if isinstance(e, exp.Boolean) and not neg:
            if f.kind != "bool":
                raise PredicateError(f"{f.name!r} is {f.kind}, not boolean")
            return bool(e.this)
        if not isinstance(e, exp.Literal):
            raise PredicateError(f"expected a literal for {f.name!r}, got {e.sql()!r}")
        text = str(e.this)
        if e.is_string:
            if neg:
                raise PredicateError(f"cannot negate the text {text!r}")
            if f.kind == "text":
                return text
            if f.kind == "time":
                return _micros(text, f)
            raise PredicateError(f"{f.name!r} is {f.kind}: compare it with a {f.kind} literal")
        if f.kind not in ("int", "float"):
            raise PredicateError(f"{f.name!r} is {f.kind}: a number does not compare with it")
        try:
            number: int | float = int(text) if re.fullmatch(r"\d+", text) else float(text)
        except ValueError:
            raise PredicateError(f"bad number {text!r}") from None
        number = -number if neg else number
        if isinstance(number, int) and not -(2**63) <= number < 2**63:
            raise PredicateError(f"{text} is outside the 64-bit integer range")
        if isinstance(number, float) and not abs(number) < float("inf"):  # inf, nan
            raise PredicateError(f"{text} is not a finite number")
        return float(number) if f.kind == "float" else number


def _micros(text: str, f: Field) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise PredicateError(f"{f.name!r} compares with an ISO-8601 time, not {text!r}") from None
    dt = dt.replace(tzinfo=UTC) if dt.utcoffset() is None else dt
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


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


class Predicate:
    """A validated predicate over one topic (``parse``), compiled on demand."""

    def __init__(self, text: str, schema: TopicSchema, node: Node) -> None:
        self.text, self.schema, self.node = text, schema, node

    @classmethod
    def parse(cls, text: str, schema: TopicSchema) -> Predicate:
        """Parse and validate ``text`` (raises ``PredicateError``)."""
        if not isinstance(text, str) or not text.strip():
            raise PredicateError("a predicate must be a non-empty string")
        if len(text) > MAX_LENGTH:
            raise PredicateError(f"predicate longer than {MAX_LENGTH} characters")
        try:
            parsed = sqlglot.parse(text)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
            raise PredicateError(f"malformed predicate {text!r}: {exc}") from None
        except RecursionError:
            raise PredicateError("predicate is nested too deeply") from None
        if len(parsed) != 1 or not isinstance(parsed[0], exp.Expression):
            raise PredicateError(f"a predicate is one expression, got {text!r}")
        return cls(text, schema, _Parser(schema).node(parsed[0]))

    def __repr__(self) -> str:
        return f"Predicate({self.text!r})"

    @property
    def columns(self) -> frozenset[str]:
        """Stored columns the predicate reads."""
        from .compiled import fields

        return frozenset(f.column for f in fields(self.node))

    def sql(self, dialect: str = "sqlite") -> sa.ColumnElement[bool]:
        """A SQLAlchemy clause over the topic table's columns; values are bound parameters."""
        from .compiled import to_sql

        return to_sql(self.node, dialect)

    def arrow(self) -> pc.Expression:
        """A ``pyarrow.compute`` expression over the topic's Arrow columns."""
        from .compiled import to_arrow

        return to_arrow(self.node)

    def row_filter(self, names: Sequence[str]) -> Callable[[Sequence[Any]], bool]:
        """A function telling whether a stored row (values in ``names`` order) passes."""
        from .compiled import to_python

        index = {n: i for i, n in enumerate(names)}
        fn = to_python(self.node, index)
        return lambda row: fn(row) is True

    def matches(self, row: Mapping[str, Any]) -> bool:
        """Whether a row given as ``{stored column: SQL value}`` passes."""
        names = list(row)
        return self.row_filter(names)(list(row.values()))

    def broker_filter(self) -> BrokerFilter:
        """The event types / partitions this predicate restricts to."""
        from .compiled import domain

        return BrokerFilter(domain(self.node, "_type"), domain(self.node, "_partition"))  # type: ignore[arg-type]
