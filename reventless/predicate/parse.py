"""SQL-style WHERE text -> a checked predicate tree (``tree.py``).

``parse_node(text, schema)`` reads the text with sqlglot, turns it into our own nodes and
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

import re
from datetime import UTC, datetime

import pyarrow as pa
import sqlglot
from sqlglot import exp

from ..codec import META_FIELDS, TopicSchema
from ..errors import PredicateError
from .tree import (
    COLUMN_ALIASES,
    TAG_NAME,
    TAGS_COLUMN,
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

MAX_LENGTH = 4096
MAX_NODES = 512

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
            f = self.field(e.this)
            if f.each:
                raise PredicateError(
                    f"{f.name!r} is never NULL (an event without tags matches no tag)"
                )
            return IsNull(f)
        if isinstance(e, exp.Between):
            f = self.field(e.this)
            if f.each:
                raise PredicateError(f"BETWEEN on {f.name!r}: compare one bound per term")
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
        if f is None and any(
            c.name == name and c.personal is not None for c in self.schema.columns
        ):
            raise PredicateError(
                f"{name!r} of topic {self.schema.name!r} is personal data, sealed at rest: "
                "a predicate cannot filter on it"
            )
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


def parse_node(text: str, schema: TopicSchema) -> Node:
    """Parse and validate ``text`` against ``schema`` (raises ``PredicateError``)."""
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
    return _Parser(schema).node(parsed[0])
