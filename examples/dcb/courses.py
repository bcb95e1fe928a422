"""Course subscriptions: a course's capacity and a student's course limit, held by DCB.

The rules (dcb.events, "Course subscriptions"): a course is defined once with a capacity
that may change to any other positive number; a student subscribes to a course that
exists, once, while it has room, and to at most ``MAX_COURSES`` courses. The invariants
span two entities (course and student) without an aggregate holding both: each decision
reads exactly the events it needs, selected by type and tag.

``course_roster`` is an ordinary read model over the DCB log: collectors see its events
like any topic's.

Example::

    app = rv.App(store="sqlite:///courses.db")
    log = app.dcb_log("courses", events=EVENTS)
    log.include(courses)
    roster = app.collect(course_roster)
    async with app:
        await log.execute(DefineCourse(course_id="c1", capacity=10))
        await log.execute(SubscribeStudent(student_id="s1", course_id="c1"))
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

import reventless as rv

#: The most courses one student may be subscribed to.
MAX_COURSES = 10


class CourseDefined(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    capacity: int


class CourseCapacityChanged(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    capacity: int


class StudentSubscribed(rv.Event):
    student_id: Annotated[str, rv.Tag("student")]
    course_id: Annotated[str, rv.Tag("course")]


EVENTS = CourseDefined | CourseCapacityChanged | StudentSubscribed


class DefineCourse(rv.Command):
    course_id: str
    capacity: int


class ChangeCourseCapacity(rv.Command):
    course_id: str
    capacity: int


class SubscribeStudent(rv.Command):
    student_id: str
    course_id: str


# -- decision models ---------------------------------------------------------------------


class CourseCapacity(rv.DecisionModel[int | None]):
    """The course's capacity; None while the course is not defined."""

    def __init__(self, course_id: str) -> None:
        super().__init__(None, tags=[f"course:{course_id}"])

    @rv.folds(CourseDefined)
    def _defined(self, state: int | None, e: CourseDefined) -> int | None:
        return e.capacity

    @rv.folds(CourseCapacityChanged)
    def _changed(self, state: int | None, e: CourseCapacityChanged) -> int | None:
        return e.capacity


class CourseSubscriptions(rv.DecisionModel[int]):
    """How many students are subscribed to the course."""

    def __init__(self, course_id: str) -> None:
        super().__init__(0, tags=[f"course:{course_id}"])

    @rv.folds(StudentSubscribed)
    def _subscribed(self, count: int, e: StudentSubscribed) -> int:
        return count + 1


class StudentSubscriptions(rv.DecisionModel[int]):
    """How many courses the student is subscribed to."""

    def __init__(self, student_id: str) -> None:
        super().__init__(0, tags=[f"student:{student_id}"])

    @rv.folds(StudentSubscribed)
    def _subscribed(self, count: int, e: StudentSubscribed) -> int:
        return count + 1


class AlreadySubscribed(rv.DecisionModel[bool]):
    """Whether the student is subscribed to the course (events carrying both tags)."""

    def __init__(self, student_id: str, course_id: str) -> None:
        super().__init__(False, tags=[f"student:{student_id}", f"course:{course_id}"])

    @rv.folds(StudentSubscribed)
    def _subscribed(self, state: bool, e: StudentSubscribed) -> bool:
        return True


# -- command handlers --------------------------------------------------------------------

courses = rv.Decider(events=EVENTS, name="courses")


@courses.decides(DefineCourse, capacity=CourseCapacity)
def define(cmd: DefineCourse, capacity: int | None) -> CourseDefined:
    if capacity is not None:
        raise rv.Rejected("course_exists", f"course {cmd.course_id} is defined already")
    if cmd.capacity < 1:
        raise rv.Rejected("bad_capacity", f"a capacity must be positive, got {cmd.capacity}")
    return CourseDefined(course_id=cmd.course_id, capacity=cmd.capacity)


@courses.decides(ChangeCourseCapacity, capacity=CourseCapacity)
def change_capacity(cmd: ChangeCourseCapacity, capacity: int | None) -> CourseCapacityChanged:
    if capacity is None:
        raise rv.Rejected("no_such_course", f"course {cmd.course_id} is not defined")
    if cmd.capacity < 1:
        raise rv.Rejected("bad_capacity", f"a capacity must be positive, got {cmd.capacity}")
    if cmd.capacity == capacity:
        raise rv.Rejected("capacity_unchanged", f"course {cmd.course_id} has {capacity} places")
    return CourseCapacityChanged(course_id=cmd.course_id, capacity=cmd.capacity)


@courses.decides(
    SubscribeStudent,
    capacity=CourseCapacity,
    taken=CourseSubscriptions,
    courses_of_student=StudentSubscriptions,
    subscribed=AlreadySubscribed,
)
def subscribe(
    cmd: SubscribeStudent,
    capacity: int | None,
    taken: int,
    courses_of_student: int,
    subscribed: bool,
) -> StudentSubscribed:
    if capacity is None:
        raise rv.Rejected("no_such_course", f"course {cmd.course_id} is not defined")
    if subscribed:
        raise rv.Rejected("already_subscribed", f"{cmd.student_id} is in {cmd.course_id}")
    if taken >= capacity:
        raise rv.Rejected("course_full", f"course {cmd.course_id} has {capacity} places")
    if courses_of_student >= MAX_COURSES:
        raise rv.Rejected("too_many_courses", f"{cmd.student_id} has {MAX_COURSES} courses")
    return StudentSubscribed(student_id=cmd.student_id, course_id=cmd.course_id)


# -- a read model over the DCB log --------------------------------------------------------


class CourseRow(BaseModel):
    course_id: str
    capacity: int
    students: int = 0


course_roster: rv.ReadModel[CourseRow] = rv.ReadModel(
    "course_roster", row=CourseRow, key="course_id"
)


@course_roster.on(
    CourseDefined, CourseCapacityChanged, StudentSubscribed, key=lambda ev: ev.event.course_id
)
def _roster(
    ev: rv.Envelope[CourseDefined | CourseCapacityChanged | StudentSubscribed],
    current: CourseRow | None,
) -> rv.Upsert[CourseRow] | None:
    e = ev.event
    if isinstance(e, CourseDefined):
        return rv.Upsert(CourseRow(course_id=e.course_id, capacity=e.capacity))
    if current is None:  # pragma: no cover - decisions never append these first
        return None
    if isinstance(e, CourseCapacityChanged):
        return rv.Upsert(current.model_copy(update={"capacity": e.capacity}))
    return rv.Upsert(current.model_copy(update={"students": current.students + 1}))
