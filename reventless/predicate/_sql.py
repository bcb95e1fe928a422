"""The sqlglot half of ``parse.py``: the text read by sqlglot, its expression turned into
our own nodes (``tree.py``), each column and literal checked against the topic. Imported
by ``parse_node`` on the first parse, not with the package."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import sqlglot
from sqlglot import exp

from ..codec import TopicSchema
from ..errors import PredicateError
from .tree import And, Compare, Field, InList, IsNull, Like, Node, Not, Op, Or, Value

_OPS: dict[type[exp.Expression], Op] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIP: dict[Op, Op] = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _Parser:
    def __init__(self, schema: TopicSchema, columns: dict[str, Field], max_nodes: int) -> None:
        self.schema = schema
        self.columns = columns
        self.max_nodes = max_nodes
        self.nodes = 0

    def node(self, e: exp.Expression) -> Node:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise PredicateError(f"predicate is too complex (more than {self.max_nodes} terms)")
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


def read(text: str, schema: TopicSchema, columns: dict[str, Field], max_nodes: int) -> Node:
    """``text`` (checked by ``parse_node``: a string within its length) as a node of
    ``schema``'s ``columns`` (``filter_columns``) of at most ``max_nodes`` terms (raises
    ``PredicateError``)."""
    try:
        parsed = sqlglot.parse(text)
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
        raise PredicateError(f"malformed predicate {text!r}: {exc}") from None
    except RecursionError:
        raise PredicateError("predicate is nested too deeply") from None
    if len(parsed) != 1 or not isinstance(parsed[0], exp.Expression):
        raise PredicateError(f"a predicate is one expression, got {text!r}")
    return _Parser(schema, columns, max_nodes).node(parsed[0])
