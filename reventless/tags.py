"""Tags, queries and append conditions: the vocabulary of dynamic consistency boundaries.

A tag is a plain string (``course:c1``) an event carries besides its type. Event models
declare tags with ``Tag`` on a field (``course_id: Annotated[str, rv.Tag("course")]``
gives ``course:<value>``; ``rv.Tag()`` takes the field name as the prefix; a ``None``
value gives no tag, a list or set value one tag per element); more can be passed at
append. A ``Query`` is a union of ``QueryItem``s; an item matches an event of any of its
types (none: any type) that carries all of its tags. An ``AppendCondition`` fails an
append if an event matching its query exists after its position.

``matches`` is the reference semantics: the stores' SQL is tested against it.

Example::

    class StudentSubscribed(rv.Event):
        student_id: Annotated[str, rv.Tag("student")]
        course_id: Annotated[str, rv.Tag("course")]

    e = StudentSubscribed(student_id="s1", course_id="c1")
    assert event_tags(e) == ("student:s1", "course:c1")
    q = Query.of(types=[StudentSubscribed], tags=["course:c1"])
    assert matches(q, "StudentSubscribed", event_tags(e))
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

from pydantic import BaseModel

from .errors import MetadataError, SpecError
from .spec import Event

__all__ = [
    "MAX_TAG",
    "AppendCondition",
    "Query",
    "QueryItem",
    "Tag",
    "check_tag",
    "event_tags",
    "matches",
    "tag_fields",
]

#: The longest tag (characters).
MAX_TAG = 256


@dataclass(frozen=True, slots=True)
class Tag:
    """Marks an event field as a tag: ``Annotated[str, rv.Tag("course")]`` gives the event
    the tag ``course:<value>``; ``rv.Tag()`` uses the field's name as the prefix.

    Example::

        class CourseDefined(rv.Event):
            course_id: Annotated[str, rv.Tag("course")]
            capacity: int
    """

    prefix: str | None = None

    def __post_init__(self) -> None:
        p = self.prefix
        if p is not None and (not isinstance(p, str) or not p or not p.isprintable()):
            raise SpecError(f"Tag prefix must be a non-empty printable string, got {p!r}")


def check_tag(tag: object) -> str:
    """``tag`` if it is a valid tag (a non-empty printable string of at most ``MAX_TAG``
    characters), else ``MetadataError``.

    Example::

        check_tag("course:c1")
    """
    if not isinstance(tag, str):
        raise MetadataError(f"a tag must be a string, got {type(tag).__name__}")
    if not tag or len(tag) > MAX_TAG or not tag.isprintable():
        raise MetadataError(f"a tag must be 1..{MAX_TAG} printable characters, got {tag!r}")
    return tag


@cache
def tag_fields(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """``(field name, prefix)`` of each field of ``model`` marked with ``Tag``.

    Example::

        assert tag_fields(StudentSubscribed) == (("student_id", "student"), ...)
    """
    out = []
    for name, info in model.model_fields.items():
        for m in info.metadata:
            if isinstance(m, Tag):
                out.append((name, m.prefix or name))
    return tuple(out)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def event_tags(event: BaseModel) -> tuple[str, ...]:
    """The tags ``event`` declares through its ``Tag`` fields, in field order, each once.

    Raises ``MetadataError`` for a value that makes an invalid tag (too long, not
    printable).

    Example::

        assert event_tags(CourseDefined(course_id="c1", capacity=3)) == ("course:c1",)
    """
    fields = tag_fields(type(event))
    if not fields:
        return ()
    d = event.__dict__
    out: list[str] = []
    for name, prefix in fields:
        value = d[name]
        if value is None:
            continue
        values = value if isinstance(value, list | tuple | set | frozenset) else (value,)
        for v in values:
            if v is not None:
                tag = check_tag(f"{prefix}:{_text(v)}")
                if tag not in out:
                    out.append(tag)
    return tuple(out)


def _type_names(types: Iterable[type[Event] | str]) -> tuple[str, ...]:
    names = set()
    for t in types:
        if isinstance(t, str) and t:
            names.add(t)
        elif isinstance(t, type) and issubclass(t, Event) and t is not Event:
            names.add(t.event_type)
        else:
            raise SpecError(f"a query type must be an Event subclass or its name, got {t!r}")
    return tuple(sorted(names))


@dataclass(frozen=True, slots=True)
class QueryItem:
    """Matches events of ANY of ``types`` (empty: any type) that carry ALL of ``tags``.

    Types may be given as event classes or names; both are kept as sorted, distinct
    names, so equal items compare equal.

    Example::

        QueryItem(types=("CourseDefined",), tags=("course:c1",))
    """

    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.types, str) or isinstance(self.tags, str):
            raise SpecError("QueryItem types and tags are collections, not one string")
        object.__setattr__(self, "types", _type_names(self.types))
        object.__setattr__(self, "tags", tuple(sorted({check_tag(t) for t in self.tags})))

    def matches(self, event_type: str, tags: Collection[str]) -> bool:
        """Whether an event of ``event_type`` carrying ``tags`` matches this item."""
        if self.types and event_type not in self.types:
            return False
        return all(t in tags for t in self.tags)


@dataclass(frozen=True, slots=True)
class Query:
    """A union of ``QueryItem``s: an event matches if it matches any item. A query with
    no items matches nothing; ``Query.all()`` matches every event.

    Example::

        q = Query.of(types=[CourseDefined], tags=["course:c1"]) | Query.of(
            types=[StudentSubscribed], tags=["student:s1"]
        )
    """

    items: tuple[QueryItem, ...]

    def __post_init__(self) -> None:
        items = tuple(self.items)
        bad = next((i for i in items if not isinstance(i, QueryItem)), None)
        if bad is not None:
            raise SpecError(f"a Query holds QueryItems, got {bad!r}")
        object.__setattr__(self, "items", tuple(dict.fromkeys(items)))

    @classmethod
    def all(cls) -> Query:
        """The query that matches every event (one item without types or tags)."""
        return cls((QueryItem(),))

    @classmethod
    def of(cls, *, types: Iterable[type[Event] | str] = (), tags: Iterable[str] = ()) -> Query:
        """The query of one item: events of any of ``types`` carrying all ``tags``."""
        return cls((QueryItem(_type_names(types), tuple(tags)),))

    def __or__(self, other: Query) -> Query:
        """The union of two queries."""
        if not isinstance(other, Query):
            return NotImplemented
        return Query(self.items + other.items)

    def matches(self, event_type: str, tags: Collection[str]) -> bool:
        """Whether an event of ``event_type`` carrying ``tags`` matches the query."""
        return any(i.matches(event_type, tags) for i in self.items)


@dataclass(frozen=True, slots=True)
class AppendCondition:
    """Fail the append (``AppendConditionError``, nothing lands) if an event matching
    ``query`` exists at a position after ``after`` (0: anywhere in the log).

    Example::

        cond = AppendCondition(Query.of(tags=["username:ada"]), after=0)  # "never claimed"
    """

    query: Query
    after: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.query, Query):
            raise SpecError(f"AppendCondition.query must be a Query, got {self.query!r}")
        if isinstance(self.after, bool) or not isinstance(self.after, int) or self.after < 0:
            raise SpecError(f"AppendCondition.after must be an int >= 0, got {self.after!r}")


def matches(query: Query, event_type: str, tags: Collection[str]) -> bool:
    """Whether an event of ``event_type`` carrying ``tags`` matches ``query`` (pure: the
    semantics the stores implement in SQL).

    Example::

        assert matches(Query.all(), "Anything", ())
        assert not matches(Query(()), "Anything", ())
    """
    return query.matches(event_type, tags)
