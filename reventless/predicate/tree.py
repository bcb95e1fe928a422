"""The tree of a parsed predicate: resolved columns (``Field``) and the nodes ``Compare``,
``InList``, ``Like``, ``IsNull``, ``And``, ``Or``, ``Not``. Pure data: the parser
(``parse.py``) builds it, the compilers (``compile.py``) read it.

A ``Field`` with ``each=True`` is a list column (the tags, ``_tags``): a comparison, IN or
LIKE on it holds when it holds for at least one element (``tag = 'course:c1'`` is "carries
the tag ``course:c1``"); an empty list holds for none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["int", "float", "bool", "text", "time"]
Op = Literal["=", "<>", "<", "<=", ">", ">="]
Value = int | float | bool | str

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

#: The stored column of an event's tags, and the name predicates use for one tag.
TAGS_COLUMN = "_tags"
TAG_NAME = "tag"


@dataclass(frozen=True, slots=True)
class Field:
    """A resolved column: the name the user wrote, the stored column, its filter kind."""

    name: str
    column: str
    kind: Kind
    each: bool = False


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
