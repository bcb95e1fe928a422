"""Sequential oracles of the DCB examples' rules, written without reventless.

Each replays a log (events in log order) and says whether every event was a decision the
rules allowed at that point; the concurrency tests read the store and replay it here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from examples.dcb.courses import (
    MAX_COURSES,
    ChangeCourseCapacity,
    CourseCapacityChanged,
    CourseDefined,
    DefineCourse,
    StudentSubscribed,
    SubscribeStudent,
)
from examples.dcb.invoices import InvoiceCreated
from examples.dcb.usernames import AccountClosed, AccountRegistered, UsernameChanged
from reventless import Command, Event


@dataclass
class CourseOracle:
    """Capacities, subscribers per course and courses per student, event by event."""

    capacity: dict[str, int] = field(default_factory=dict)
    students: dict[str, set[str]] = field(default_factory=dict)
    courses_of: dict[str, set[str]] = field(default_factory=dict)

    def decide(self, cmd: Command) -> Event | str:
        """What the rules make of ``cmd`` now: its event, or the rejection code."""
        if isinstance(cmd, DefineCourse):
            if cmd.course_id in self.capacity:
                return "course_exists"
            if cmd.capacity < 1:
                return "bad_capacity"
            return CourseDefined(course_id=cmd.course_id, capacity=cmd.capacity)
        if isinstance(cmd, ChangeCourseCapacity):
            if cmd.course_id not in self.capacity:
                return "no_such_course"
            if cmd.capacity < 1:
                return "bad_capacity"
            if cmd.capacity == self.capacity[cmd.course_id]:
                return "capacity_unchanged"
            return CourseCapacityChanged(course_id=cmd.course_id, capacity=cmd.capacity)
        if isinstance(cmd, SubscribeStudent):
            if cmd.course_id not in self.capacity:
                return "no_such_course"
            subs = self.students[cmd.course_id]
            if cmd.student_id in subs:
                return "already_subscribed"
            if len(subs) >= self.capacity[cmd.course_id]:
                return "course_full"
            if len(self.courses_of.get(cmd.student_id, ())) >= MAX_COURSES:
                return "too_many_courses"
            return StudentSubscribed(student_id=cmd.student_id, course_id=cmd.course_id)
        raise TypeError(f"unexpected command {cmd!r}")

    def violation(self, e: Event) -> str | None:
        """Why ``e`` breaks a rule given the events before it (None: it is allowed); then
        apply it."""
        if isinstance(e, CourseDefined):
            if e.course_id in self.capacity:
                return f"{e.course_id} defined twice"
            if e.capacity < 1:
                return f"{e.course_id} defined with capacity {e.capacity}"
            self.capacity[e.course_id] = e.capacity
            self.students[e.course_id] = set()
            return None
        if isinstance(e, CourseCapacityChanged):
            old = self.capacity.get(e.course_id)
            if old is None or old == e.capacity or e.capacity < 1:
                return f"{e.course_id} capacity {old} -> {e.capacity}"
            self.capacity[e.course_id] = e.capacity
            return None
        if isinstance(e, StudentSubscribed):
            cap = self.capacity.get(e.course_id)
            if cap is None:
                return f"{e.student_id} subscribed to undefined {e.course_id}"
            subs = self.students[e.course_id]
            mine = self.courses_of.setdefault(e.student_id, set())
            if e.student_id in subs:
                return f"{e.student_id} subscribed to {e.course_id} twice"
            if len(subs) >= cap:
                return f"{e.course_id} over capacity {cap}"
            if len(mine) >= MAX_COURSES:
                return f"{e.student_id} over {MAX_COURSES} courses"
            subs.add(e.student_id)
            mine.add(e.course_id)
            return None
        return f"unexpected event {e!r}"


@dataclass
class UsernameOracle:
    """Who owns each username and each account's username, event by event."""

    owner: dict[str, str] = field(default_factory=dict)
    name_of: dict[str, str] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)

    def _claim(self, account: str, name: str) -> str | None:
        if name in self.owner:
            return f"{name!r} claimed by {account} while {self.owner[name]} owns it"
        self.owner[name] = account
        self.name_of[account] = name
        return None

    def violation(self, e: Event) -> str | None:
        """Why ``e`` breaks a rule (None: allowed); then apply it."""
        if isinstance(e, AccountRegistered):
            if e.account_id in self.name_of or e.account_id in self.closed:
                return f"account {e.account_id} registered twice"
            return self._claim(e.account_id, e.username)
        if isinstance(e, UsernameChanged):
            if self.name_of.get(e.account_id) != e.old_username:
                return f"{e.account_id} does not own {e.old_username!r}"
            del self.owner[e.old_username]
            return self._claim(e.account_id, e.new_username)
        if isinstance(e, AccountClosed):
            if self.name_of.get(e.account_id) != e.username:
                return f"{e.account_id} closed with a name it does not own"
            del self.owner[e.username]
            del self.name_of[e.account_id]
            self.closed.add(e.account_id)
            return None
        return f"unexpected event {e!r}"


def invoice_numbers_are_gapless(events: Iterable[Event]) -> bool:
    """The invoices' numbers in log order are 1, 2, 3, ..."""
    numbers = [e.number for e in events if isinstance(e, InvoiceCreated)]
    return numbers == list(range(1, len(numbers) + 1))


def replay(oracle: CourseOracle | UsernameOracle, events: Iterable[Event]) -> list[str]:
    """Every violation found replaying ``events`` in order (empty: the log is valid)."""
    return [v for e in events if (v := oracle.violation(e)) is not None]
