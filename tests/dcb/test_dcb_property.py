"""Random course decisions (hypothesis) against a sequential oracle written without
reventless (``oracle.py``).

Sequentially and in memory, the decision models and the oracle decide every command the
same way. Concurrently (every command of an example in flight at once as asyncio tasks,
on a SQLite file and on PostgreSQL, with and without the in-process decision queue), the
log read back from the store replays through the oracle without a violation, and holds
exactly the events of the decisions that landed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from examples.dcb.courses import EVENTS as COURSE_EVENTS
from examples.dcb.courses import (
    ChangeCourseCapacity,
    DefineCourse,
    SubscribeStudent,
    courses,
)
from reventless.tags import event_tags
from tests.dcb.oracle import CourseOracle, replay

COURSES = [f"c{i}" for i in range(12)]  # a student reaching the limit of 10 is possible
STUDENTS = ["s1", "s2", "s3"]

a_command = st.one_of(
    st.builds(DefineCourse, course_id=st.sampled_from(COURSES), capacity=st.integers(0, 3)),
    st.builds(ChangeCourseCapacity, course_id=st.sampled_from(COURSES), capacity=st.integers(0, 3)),
    *[
        st.builds(
            SubscribeStudent,
            student_id=st.sampled_from(STUDENTS),
            course_id=st.sampled_from(COURSES),
        )
    ]
    * 4,  # mostly subscriptions
)


@st.composite
def a_run(draw: st.DrawFn) -> list[rv.Command]:
    """Most courses defined first (so subscriptions mostly get somewhere), then anything."""
    defined = draw(st.lists(st.sampled_from(COURSES), unique=True, min_size=6))
    first: list[rv.Command] = [
        DefineCourse(course_id=c, capacity=draw(st.integers(1, 3))) for c in defined
    ]
    return first + draw(st.lists(a_command, min_size=5, max_size=60))


@settings(max_examples=150)
@given(commands=a_run())
def test_the_decision_models_decide_as_the_sequential_oracle(commands: list[rv.Command]) -> None:
    oracle = CourseOracle()
    log: list[tuple[rv.Event, tuple[str, ...]]] = []
    for cmd in commands:
        expected = oracle.decide(cmd)
        try:
            [event] = courses.decide(cmd, log)
        except rv.Rejected as r:
            assert r.code == expected, cmd
            continue
        assert event == expected, cmd
        assert oracle.violation(event) is None
        log.append((event, event_tags(event)))


def fresh_pg_url(pg_database: str) -> str:
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    plain = pg_database.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{pg_database}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite-file", pytest.param("postgres", marks=[pytest.mark.postgres])])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Makes a fresh, empty store URL per hypothesis example."""
    if request.param == "sqlite-file":
        return lambda: f"sqlite:///{tmp_path / uuid.uuid4().hex}.db"
    database = request.getfixturevalue("pg_database")
    return lambda: fresh_pg_url(database)


async def run_concurrently(url: str, commands: list[rv.Command], queue: bool) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=COURSE_EVENTS)
    log.include(courses)
    patient = rv.DecideOptions(max_attempts=1000, backoff_base=0.001, backoff_max=0.01, queue=queue)

    async def one(cmd: rv.Command) -> rv.DecisionResult | None:
        try:
            return await log.execute(cmd, options=patient)
        except rv.Rejected:
            return None

    async with app:
        results = await asyncio.gather(*(one(c) for c in commands))
        stored = await log.read(rv.Query.all())
    events = [e.event for e in stored]
    assert replay(CourseOracle(), events) == []
    landed = sorted((r.first_offset, r.events) for r in results if r is not None and r.events)
    assert [(e.offset, (e.event,)) for e in stored] == landed  # one event per decision
    assert all(e.tags == event_tags(e.event) for e in stored)


@pytest.mark.slow
@settings(max_examples=25)
@given(commands=a_run(), queue=st.booleans())
def test_concurrent_decisions_never_break_what_the_oracle_keeps(
    new_url: Any, commands: list[rv.Command], queue: bool
) -> None:
    # without the in-process queue, overlapping decisions clash in the store itself
    asyncio.run(run_concurrently(new_url(), commands, queue))
