"""Events of the DCB storage tests (importable by spawned writer processes)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import reventless as rv


class Level(Enum):
    BASIC = "basic"
    PRO = "pro"


class CourseDefined(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    capacity: int


class StudentSubscribed(rv.Event):
    student_id: Annotated[str, rv.Tag("student")]
    course_id: Annotated[str, rv.Tag("course")]


class NoteTaken(rv.Event):
    """No tag field: its tags come only from ``tags=`` at append."""

    text: str


class Graded(rv.Event):
    """Tags from an int, an enum, an optional value and a list (``rv.Tag()``: field name)."""

    grade: Annotated[int, rv.Tag()]
    level: Annotated[Level, rv.Tag("level")]
    mentor: Annotated[str | None, rv.Tag("mentor")] = None
    labels: Annotated[list[str], rv.Tag("label")] = []


EVENTS = (CourseDefined, StudentSubscribed, NoteTaken, Graded)


class Opened(rv.Event):
    """An aggregate's event with a tag field."""

    owner: Annotated[str, rv.Tag("owner")]


class Closed(rv.Event):
    reason: str


class Open(rv.Command):
    owner: str


class Close(rv.Command):
    reason: str


class Ticket(rv.Aggregate):
    """An aggregate whose events carry tags: its log has ``_tags`` and a tag index."""

    events = Opened | Closed
    owner: str = ""
    closed: bool = False

    @rv.handles(Open)
    def open(self, cmd: Open) -> Opened:
        return Opened(owner=cmd.owner)

    @rv.handles(Close)
    def close(self, cmd: Close) -> Closed:
        return Closed(reason=cmd.reason)

    @rv.applies(Opened)
    def _opened(self, e: Opened) -> None:
        self.owner = e.owner

    @rv.applies(Closed)
    def _closed(self, e: Closed) -> None:
        self.closed = True
