"""A DCB log for the Spark tests (importable by the executors)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

import reventless as rv


class CourseDefined(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    capacity: int


class StudentSubscribed(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    student_id: Annotated[str, rv.Tag("student")]


class CourseRow(BaseModel):
    course_id: str
    capacity: int = 0
    students: int = 0


courses_view = rv.ReadModel("course_view", row=CourseRow, key="course_id")


@courses_view.on(CourseDefined, key=lambda ev: ev.event.course_id)
def _defined(ev: rv.Envelope[CourseDefined], row: CourseRow | None) -> rv.Upsert[CourseRow]:
    students = row.students if row else 0
    return rv.Upsert(
        CourseRow(course_id=ev.event.course_id, capacity=ev.event.capacity, students=students)
    )


@courses_view.on(StudentSubscribed, key=lambda ev: ev.event.course_id)
def _subscribed(ev: rv.Envelope[StudentSubscribed], row: CourseRow | None) -> rv.Upsert[CourseRow]:
    base = row or CourseRow(course_id=ev.event.course_id)
    return rv.Upsert(base.model_copy(update={"students": base.students + 1}))
