"""Predicates: SQL-style WHERE text over a topic's columns, parsed once (``parse.py``, with
sqlglot) into a checked tree (``tree.py``) and compiled (``compile.py``) to a SQLAlchemy
clause, a ``pyarrow.compute`` expression, a Python row filter and a broker filter.

Below both collectors (``where=``) and subscriptions; imports neither.

Example::

    p = Predicate.parse("type = 'OrderPlaced' AND total > 100", topic.schema)
    batch.filter(p.arrow())
"""

from __future__ import annotations

from ..errors import PredicateError
from .compile import BrokerFilter, like_regex
from .parse import MAX_LENGTH, MAX_NODES, filter_columns, parse_node
from .predicate import Predicate
from .tree import (
    COLUMN_ALIASES,
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

__all__ = [
    "COLUMN_ALIASES",
    "MAX_LENGTH",
    "MAX_NODES",
    "And",
    "BrokerFilter",
    "Compare",
    "Field",
    "InList",
    "IsNull",
    "Kind",
    "Like",
    "Node",
    "Not",
    "Op",
    "Or",
    "Predicate",
    "PredicateError",
    "Value",
    "filter_columns",
    "like_regex",
    "parse_node",
]
