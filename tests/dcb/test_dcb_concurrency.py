"""The DCB examples' invariants hold under 8 concurrent writer processes (spawned, each with
its own App on the same store), on a SQLite file and on PostgreSQL.

After the writers finish, the test reads the whole log from the store and replays it
through a sequential oracle written without reventless (``oracle.py``): every event must
be one the rules allowed at its position. It also checks that the writers really raced
(decisions were retried) and that the outcome is complete (nothing left undone that the
rules would have allowed).
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import reventless as rv
from examples.dcb.courses import EVENTS as COURSE_EVENTS
from examples.dcb.courses import MAX_COURSES, DefineCourse, StudentSubscribed, courses
from examples.dcb.invoices import InvoiceCreated
from examples.dcb.usernames import EVENTS as ACCOUNT_EVENTS
from examples.dcb.usernames import AccountRegistered, UsernameChanged
from tests.dcb.oracle import CourseOracle, UsernameOracle, invoice_numbers_are_gapless, replay
from tests.dcb.writers import (
    churn_usernames,
    create_invoices,
    start_together,
    subscribe_everyone,
)

WRITERS = 8


@pytest.fixture
def url(shared_url: str) -> str:
    """A fresh store shared by the writer processes: a SQLite file or a PostgreSQL schema."""
    return shared_url


def run_writers(fn: Any, *args_per_worker: tuple[Any, ...]) -> list[Any]:
    ctx = multiprocessing.get_context("spawn")
    n = len(args_per_worker)
    with ctx.Manager() as manager, ProcessPoolExecutor(n, mp_context=ctx) as pool:
        barrier = manager.Barrier(n)  # the writers start their decisions together
        futures = [pool.submit(start_together, barrier, fn, *args) for args in args_per_worker]
        return [f.result(timeout=240) for f in futures]


async def read_log(url: str, name: str, events: Any) -> list[rv.Event]:
    app = rv.App(store=url)
    log = app.dcb_log(name, events=events)
    async with app:
        return [e.event for e in await log.read(rv.Query.all())]


def test_course_capacity_and_student_limit_hold_under_8_writer_processes(url: str) -> None:
    # 3 small courses (3 places) and 9 large ones (9 places: never full) for 8 students who
    # each try all 12 with a limit of 10: the small courses and the student limit both bind
    capacity = {f"c{i}": 3 if i < 3 else 9 for i in range(12)}
    course_ids = list(capacity)
    students = [f"s{i}" for i in range(8)]

    async def define() -> None:
        app = rv.App(store=url)
        log = app.dcb_log("courses", events=COURSE_EVENTS)
        log.include(courses)
        async with app:
            for c, places in capacity.items():
                await log.execute(DefineCourse(course_id=c, capacity=places))

    asyncio.run(define())
    outcomes = run_writers(
        subscribe_everyone, *[(url, w, students, course_ids) for w in range(WRITERS)]
    )

    events = asyncio.run(read_log(url, "courses", COURSE_EVENTS))
    assert replay(CourseOracle(), events) == []  # no course over capacity, no student over
    subs = [(e.student_id, e.course_id) for e in events if isinstance(e, StudentSubscribed)]
    assert len(subs) == len(set(subs))  # no double subscription
    per_course = Counter(c for _, c in subs)
    per_student = Counter(s for s, _ in subs)
    assert all(n <= capacity[c] for c, n in per_course.items())
    assert max(per_student.values()) <= MAX_COURSES
    # complete: every pair left out was refused for a reason that still holds
    for s in students:
        for c in course_ids:
            full = per_course[c] == capacity[c]
            assert (s, c) in subs or full or per_student[s] == MAX_COURSES
    # and so both limits bind (see above)
    assert any(per_course[c] == capacity[c] for c in course_ids)
    assert any(per_student[s] == MAX_COURSES for s in students)
    total = Counter[str]()
    for o in outcomes:
        total.update(o)
    assert total["ok"] == len(subs)  # each landed decision is one event, and vice versa
    assert total["already_subscribed"] > 0
    assert total["course_full"] + total["too_many_courses"] > 0
    assert total["attempts"] >= total["ok"]
    # the writers did collide, and retried (a retry may end in a refusal: a decision that
    # retried and then found the course full counts here, not in ``attempts``)
    assert total["retries"] > 0


def test_a_username_never_has_two_owners_under_8_writer_processes(url: str) -> None:
    names = ["ada", "bob", "cy"]
    outcomes = run_writers(churn_usernames, *[(url, w, names, 12) for w in range(WRITERS)])

    events = asyncio.run(read_log(url, "accounts", ACCOUNT_EVENTS))
    assert replay(UsernameOracle(), events) == []  # never two owners, at any position
    claims = Counter(
        e.username if isinstance(e, AccountRegistered) else e.new_username
        for e in events
        if isinstance(e, AccountRegistered | UsernameChanged)
    )
    assert all(claims[n] > 1 for n in names)  # claimed, released and re-claimed
    total = Counter[str]()
    for o in outcomes:
        total.update(o)
    registered = sum(isinstance(e, AccountRegistered) for e in events)
    assert total["register:ok"] == registered
    assert total["register:username_claimed"] > 0  # the writers did contend for names


def test_invoice_numbers_are_gapless_and_unique_under_8_writer_processes(url: str) -> None:
    per_writer = 15
    numbers = run_writers(create_invoices, *[(url, w, per_writer) for w in range(WRITERS)])

    events = asyncio.run(read_log(url, "invoices", InvoiceCreated))
    assert invoice_numbers_are_gapless(events)
    assert len(events) == WRITERS * per_writer
    got = sorted(n for ns in numbers for n in ns)
    assert got == list(range(1, WRITERS * per_writer + 1))  # each caller got its own number
    for w, ns in enumerate(numbers):  # and the log agrees on whose it is
        mine = {e.number for e in events if isinstance(e, InvoiceCreated) and e.customer == f"w{w}"}
        assert set(ns) == mine
