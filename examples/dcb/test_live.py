"""The DCB examples on real stores (SQLite file and memory, PostgreSQL): every outcome is
read back from the store."""

from __future__ import annotations

from typing import Any

import pytest

import reventless as rv
from examples.dcb import courses as c
from examples.dcb import invoices as i
from examples.dcb import usernames as u


@pytest.fixture
def url(any_url: str) -> str:
    """A fresh store of each kind: a SQLite file, SQLite in memory, a PostgreSQL schema."""
    return any_url


async def stored(log: rv.DcbLog) -> list[tuple[int, rv.Event, tuple[str, ...]]]:
    return [(e.offset, e.event, e.tags) for e in await log.read(rv.Query.all())]


async def rejected(log: rv.DcbLog, cmd: rv.Command) -> str:
    with pytest.raises(rv.Rejected) as caught:
        await log.execute(cmd)
    return caught.value.code


async def test_course_subscriptions(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=c.EVENTS)
    log.include(c.courses)
    roster = app.collect(c.course_roster)
    async with app:
        await log.execute(c.DefineCourse(course_id="c1", capacity=1))
        assert await rejected(log, c.DefineCourse(course_id="c1", capacity=2)) == "course_exists"
        await log.execute(c.SubscribeStudent(student_id="s1", course_id="c1"))
        sub2 = c.SubscribeStudent(student_id="s2", course_id="c1")
        assert await rejected(log, sub2) == "course_full"
        await log.execute(c.ChangeCourseCapacity(course_id="c1", capacity=2))
        res = await log.execute(sub2)
        assert res.position == 3 and res.first_offset == 4
        assert await rejected(log, sub2) == "already_subscribed"
        for n in range(2, 12):
            await log.execute(c.DefineCourse(course_id=f"c{n}", capacity=1))
        for n in range(2, 11):
            await log.execute(c.SubscribeStudent(student_id="s1", course_id=f"c{n}"))
        last = c.SubscribeStudent(student_id="s1", course_id="c11")
        assert await rejected(log, last) == "too_many_courses"
        log_ = await stored(log)
        assert log_[:4] == [
            (1, c.CourseDefined(course_id="c1", capacity=1), ("course:c1",)),
            (2, c.StudentSubscribed(student_id="s1", course_id="c1"), ("student:s1", "course:c1")),
            (3, c.CourseCapacityChanged(course_id="c1", capacity=2), ("course:c1",)),
            (4, c.StudentSubscribed(student_id="s2", course_id="c1"), ("student:s2", "course:c1")),
        ]
        assert len(log_) == 4 + 10 + 9
        await app.settle()
        assert await roster.get("c1") == c.CourseRow(course_id="c1", capacity=2, students=2)
        assert await roster.get("c11") == c.CourseRow(course_id="c11", capacity=1, students=0)


async def test_unique_usernames_claim_release_reclaim(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("accounts", events=u.EVENTS)
    log.include(u.accounts)
    async with app:
        await log.execute(u.RegisterAccount(account_id="a1", username="ada"))
        taken = u.RegisterAccount(account_id="a2", username="ada")
        assert await rejected(log, taken) == "username_claimed"
        await log.execute(u.ChangeUsername(account_id="a1", username="lovelace"))
        await log.execute(taken)  # released by the change: re-claimed
        assert await rejected(log, u.ChangeUsername(account_id="a1", username="ada")) == (
            "username_claimed"
        )
        await log.execute(u.CloseAccount(account_id="a2"))
        await log.execute(u.ChangeUsername(account_id="a1", username="ada"))  # released again
        owners: dict[str, Any] = {}
        for _, e, tags in await stored(log):
            if isinstance(e, u.AccountRegistered):
                owners[e.username] = e.account_id
                assert tags == (f"account:{e.account_id}", f"username:{e.username}")
            elif isinstance(e, u.UsernameChanged):
                assert owners.pop(e.old_username) == e.account_id
                owners[e.new_username] = e.account_id
            elif isinstance(e, u.AccountClosed):
                assert owners.pop(e.username) == e.account_id
        assert owners == {"ada": "a1"}
        claimed = await log.read(rv.Query.of(tags=["username:ada"]))
        assert [e.type for e in claimed] == [
            "AccountRegistered",
            "UsernameChanged",
            "AccountRegistered",
            "AccountClosed",
            "UsernameChanged",
        ]


async def test_invoice_numbers(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("invoices", events=i.InvoiceCreated)
    log.include(i.invoices)
    async with app:
        for n in range(3):
            await log.execute(i.CreateInvoice(customer=f"k{n}", amount_cents=100))
        assert await rejected(log, i.CreateInvoice(customer="x", amount_cents=0)) == "bad_amount"
        res = await log.execute(i.CreateInvoice(customer="ada", amount_cents=5))
        assert res.events == (i.InvoiceCreated(number=4, customer="ada", amount_cents=5),)
        assert [(o, e.number) for o, e, _ in await stored(log)] == [  # type: ignore[attr-defined]
            (1, 1),
            (2, 2),
            (3, 3),
            (4, 4),
        ]
        [mine] = await log.read(rv.Query.of(tags=["customer:ada"]))
        assert mine.tags == ("invoice:4", "customer:ada")
