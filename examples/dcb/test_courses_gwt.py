"""Course subscriptions, decided in memory (given events, when command, then events)."""

from __future__ import annotations

import pytest

import reventless as rv
from examples.dcb.courses import (
    MAX_COURSES,
    AlreadySubscribed,
    ChangeCourseCapacity,
    CourseCapacity,
    CourseCapacityChanged,
    CourseDefined,
    CourseSubscriptions,
    DefineCourse,
    StudentSubscribed,
    StudentSubscriptions,
    SubscribeStudent,
    courses,
)
from reventless.testing import fold_model, given_dcb


def defined(course: str, capacity: int = 10) -> CourseDefined:
    return CourseDefined(course_id=course, capacity=capacity)


def sub(student: str, course: str) -> StudentSubscribed:
    return StudentSubscribed(student_id=student, course_id=course)


def test_a_course_is_defined_once() -> None:
    given_dcb(courses).when(DefineCourse(course_id="c1", capacity=3)).then(defined("c1", 3))
    given_dcb(courses, defined("c1")).when(DefineCourse(course_id="c1", capacity=3)).then_rejected(
        "course_exists"
    )
    # another course's definition is not in this decision's query
    given_dcb(courses, defined("c2")).when(DefineCourse(course_id="c1", capacity=3)).then(
        defined("c1", 3)
    )
    given_dcb(courses).when(DefineCourse(course_id="c1", capacity=0)).then_rejected("bad_capacity")


def test_capacity_changes_to_another_positive_number_of_a_defined_course() -> None:
    given_dcb(courses).when(ChangeCourseCapacity(course_id="c1", capacity=5)).then_rejected(
        "no_such_course"
    )
    given_dcb(courses, defined("c1", 5)).when(
        ChangeCourseCapacity(course_id="c1", capacity=5)
    ).then_rejected("capacity_unchanged")
    given_dcb(courses, defined("c1", 5)).when(
        ChangeCourseCapacity(course_id="c1", capacity=7)
    ).then(CourseCapacityChanged(course_id="c1", capacity=7))


def test_subscribing_needs_a_course() -> None:
    given_dcb(courses).when(SubscribeStudent(student_id="s1", course_id="c1")).then_rejected(
        "no_such_course"
    )


def test_a_student_subscribes_once() -> None:
    scenario = given_dcb(courses, defined("c1"), sub("s1", "c1"))
    scenario.when(SubscribeStudent(student_id="s1", course_id="c1")).then_rejected(
        "already_subscribed"
    )
    scenario.when(SubscribeStudent(student_id="s2", course_id="c1")).then(sub("s2", "c1"))


def test_a_full_course_takes_nobody_until_its_capacity_grows() -> None:
    full = [defined("c1", 2), sub("s1", "c1"), sub("s2", "c1")]
    given_dcb(courses, *full).when(SubscribeStudent(student_id="s3", course_id="c1")).then_rejected(
        "course_full"
    )
    grown = CourseCapacityChanged(course_id="c1", capacity=3)
    given_dcb(courses, *full, grown).when(SubscribeStudent(student_id="s3", course_id="c1")).then(
        sub("s3", "c1")
    )


def test_a_student_takes_at_most_max_courses() -> None:
    past: list[rv.Event] = [defined(f"c{i}") for i in range(MAX_COURSES + 1)]
    past += [sub("s1", f"c{i}") for i in range(MAX_COURSES)]
    given_dcb(courses, *past).when(
        SubscribeStudent(student_id="s1", course_id=f"c{MAX_COURSES}")
    ).then_rejected("too_many_courses")
    given_dcb(courses, *past).when(
        SubscribeStudent(student_id="s2", course_id=f"c{MAX_COURSES}")
    ).then(sub("s2", f"c{MAX_COURSES}"))


def test_the_decided_event_carries_the_course_and_student_tags() -> None:
    out = given_dcb(courses, defined("c1")).when(SubscribeStudent(student_id="s1", course_id="c1"))
    assert out.tags == [("student:s1", "course:c1")]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (CourseCapacity("c1"), 4),
        (CourseCapacity("c9"), None),
        (CourseSubscriptions("c1"), 2),
        (StudentSubscriptions("s1"), 2),
        (StudentSubscriptions("s3"), 0),
        (AlreadySubscribed("s1", "c2"), True),
        (AlreadySubscribed("s2", "c2"), False),
    ],
)
def test_each_model_folds_only_the_events_its_query_matches(
    model: object, expected: object
) -> None:
    past = [
        defined("c1", 2),
        defined("c2", 2),
        sub("s1", "c1"),
        sub("s2", "c1"),
        sub("s1", "c2"),
        CourseCapacityChanged(course_id="c1", capacity=4),
    ]
    assert fold_model(model, *past) == expected  # type: ignore[arg-type]
