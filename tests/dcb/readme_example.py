import asyncio
from typing import Annotated

import reventless as rv
from reventless.testing import given_dcb


class CourseDefined(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]  # the event carries the tag "course:<id>"
    capacity: int


class StudentSubscribed(rv.Event):
    student_id: Annotated[str, rv.Tag("student")]
    course_id: Annotated[str, rv.Tag("course")]


class Subscribe(rv.Command):
    student_id: str
    course_id: str


class CourseCapacity(rv.DecisionModel[int]):
    """The course's places (0: no such course)."""

    def __init__(self, course_id: str) -> None:
        super().__init__(0, tags=[f"course:{course_id}"])

    @rv.folds(CourseDefined)
    def _defined(self, places: int, e: CourseDefined) -> int:
        return e.capacity


class Subscriptions(rv.DecisionModel[int]):
    """How many subscriptions carry a tag: a course's students, or a student's courses."""

    def __init__(self, tag: str) -> None:
        super().__init__(0, tags=[tag])

    @rv.folds(StudentSubscribed)
    def _subscribed(self, n: int, e: StudentSubscribed) -> int:
        return n + 1


app = rv.App(store="sqlite://")
courses = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)


@courses.decides(
    Subscribe,
    places=CourseCapacity,  # CourseCapacity(course_id=cmd.course_id)
    taken=lambda cmd: Subscriptions(f"course:{cmd.course_id}"),
    mine=lambda cmd: Subscriptions(f"student:{cmd.student_id}"),
)
def subscribe(cmd: Subscribe, places: int, taken: int, mine: int) -> StudentSubscribed:
    if taken >= places:
        raise rv.Rejected("course_full", f"{cmd.course_id} has {places} places")
    if mine >= 3:
        raise rv.Rejected("too_many_courses", cmd.student_id)
    return StudentSubscribed(student_id=cmd.student_id, course_id=cmd.course_id)


# Given/when/then, in memory: no store
given_dcb(
    courses,
    CourseDefined(course_id="c1", capacity=1),
    StudentSubscribed(student_id="ada", course_id="c1"),
).when(Subscribe(student_id="bob", course_id="c1")).then_rejected("course_full")


async def main() -> None:
    async with app:
        await courses.append([CourseDefined(course_id="c1", capacity=2)])
        for student in ["ada", "bob", "cy"]:
            try:
                res = await courses.execute(Subscribe(student_id=student, course_id="c1"))
                print(f"{student}: subscribed at position {res.last_offset}")
            except rv.Rejected as r:
                print(f"{student}: rejected: {r.code}")
        for ev in await courses.read(rv.Query.of(tags=["course:c1"])):
            print(ev.offset, ev.type, ev.tags)


asyncio.run(main())
