"""``DcbLog.execute`` on SQLite (file, memory) and PostgreSQL: one read of the union query,
the append condition derived from it, retries that read what landed since, command ids
that land once. Outcomes are read back from the store.

Conflicts are made deterministic by a log that appends a competing event (for real, on
the same store) right after the decision's read, as another writer would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

import reventless as rv
from examples.dcb.courses import (
    EVENTS as COURSE_EVENTS,
)
from examples.dcb.courses import (
    CourseDefined,
    DefineCourse,
    StudentSubscribed,
    SubscribeStudent,
    courses,
)
from examples.dcb.invoices import CreateInvoice, InvoiceCreated, invoices
from examples.dcb.usernames import EVENTS as ACCOUNT_EVENTS
from examples.dcb.usernames import AccountRegistered, RegisterAccount, accounts
from reventless.dcb.execute import execute
from reventless.store.append import AppendResult

NO_WAIT = rv.DecideOptions(max_attempts=3, backoff_base=0.0, backoff_max=0.0)


@pytest.fixture
def url(any_url: str) -> str:
    """A fresh store of each kind: a SQLite file, SQLite in memory, a PostgreSQL schema."""
    return any_url


class Interleaved:
    """A DCB log whose first ``reads`` reads are each followed by a competing append (a
    real one, on the same store): the decision's append then finds it after its position.
    """

    def __init__(
        self,
        log: rv.DcbLog,
        competing: list[list[rv.Event]],
        command_id: str | None = None,
    ) -> None:
        self.log = log
        self.name = log.name
        self.competing = competing
        self.command_id = command_id
        self.reads: list[int] = []  # the ``after`` of every read

    @property
    def store(self) -> Any:
        return self.log.store

    @property
    def schema(self) -> Any:
        return self.log.schema

    async def landed(self, command_id: str | None) -> Any:
        return await self.log.landed(command_id)

    async def read(self, query: rv.Query, *, after: int = 0) -> list[rv.Envelope[Any]]:
        self.reads.append(after)
        envs = await self.log.read(query, after=after)
        if self.competing:
            await self.log.append(self.competing.pop(0), command_id=self.command_id)
        return envs

    async def append(
        self,
        events: Sequence[rv.Event],
        *,
        condition: rv.AppendCondition | None = None,
        tags: Any = None,
        meta: rv.Metadata | None = None,
        command_id: str | None = None,
    ) -> AppendResult:
        return await self.log.append(
            events, condition=condition, tags=tags, meta=meta, command_id=command_id
        )


def course_app(url: str) -> tuple[rv.App, rv.DcbLog]:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=COURSE_EVENTS)
    log.include(courses)
    return app, log


def invoice_app(url: str) -> tuple[rv.App, rv.DcbLog]:
    app = rv.App(store=url)
    log = app.dcb_log("invoices", events=InvoiceCreated)
    log.include(invoices)
    return app, log


async def everything(log: rv.DcbLog) -> list[tuple[int, rv.Event, tuple[str, ...]]]:
    return [(e.offset, e.event, e.tags) for e in await log.read(rv.Query.all())]


async def test_a_decision_appends_its_events_with_their_tags_and_positions(url: str) -> None:
    app, log = course_app(url)
    async with app:
        first = await log.execute(DefineCourse(course_id="c1", capacity=2))
        second = await log.execute(
            SubscribeStudent(student_id="s1", course_id="c1"),
            meta=rv.Metadata(user="ada"),
        )
        assert (first.first_offset, first.last_offset, first.position, first.attempts) == (
            1,
            1,
            0,
            1,
        )
        assert second.events == (StudentSubscribed(student_id="s1", course_id="c1"),)
        assert (second.first_offset, second.last_offset, second.position) == (2, 2, 1)
        assert await everything(log) == [
            (1, CourseDefined(course_id="c1", capacity=2), ("course:c1",)),
            (2, StudentSubscribed(student_id="s1", course_id="c1"), ("student:s1", "course:c1")),
        ]
        [env] = await log.read(rv.Query.of(tags=["student:s1"]))
        assert env.meta.user == "ada"


async def test_a_rejection_lands_nothing(url: str) -> None:
    app, log = course_app(url)
    async with app:
        with pytest.raises(rv.Rejected, match="no_such_course"):
            await log.execute(SubscribeStudent(student_id="s1", course_id="c1"))
        await log.execute(DefineCourse(course_id="c1", capacity=1))
        await log.execute(SubscribeStudent(student_id="s1", course_id="c1"))
        with pytest.raises(rv.Rejected, match="course_full"):
            await log.execute(SubscribeStudent(student_id="s2", course_id="c1"))
        assert await log.head() == 2


async def test_a_command_without_a_handler_reads_nothing(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=COURSE_EVENTS)
    async with app:
        with pytest.raises(rv.UnhandledCommandError):
            await log.execute(DefineCourse(course_id="c1", capacity=1))


async def test_a_conflict_reads_what_landed_since_and_decides_again(url: str) -> None:
    app, log = invoice_app(url)
    async with app:
        other = InvoiceCreated(number=1, customer="bob", amount_cents=7)
        racing = Interleaved(log, [[other]])
        res = await execute(
            racing, log.decider, CreateInvoice(customer="ada", amount_cents=5), options=NO_WAIT
        )
        assert res.attempts == 2
        assert res.events == (InvoiceCreated(number=2, customer="ada", amount_cents=5),)
        assert racing.reads == [0, 0]  # the first read saw nothing: the retry reads from 0
        assert (res.first_offset, res.position) == (2, 1)
        assert [e.number for _, e, _ in await everything(log)] == [1, 2]  # type: ignore[attr-defined]


async def test_a_retry_reads_only_after_the_position_it_had_read(url: str) -> None:
    app, log = invoice_app(url)
    async with app:
        await log.execute(CreateInvoice(customer="x", amount_cents=1))
        await log.execute(CreateInvoice(customer="y", amount_cents=1))
        other = InvoiceCreated(number=3, customer="bob", amount_cents=7)
        racing = Interleaved(log, [[other]])
        res = await execute(
            racing, log.decider, CreateInvoice(customer="ada", amount_cents=5), options=NO_WAIT
        )
        assert racing.reads == [0, 2]
        assert res.events[0].number == 4  # type: ignore[attr-defined]
        assert res.position == 3


async def test_an_event_outside_the_query_is_no_conflict(url: str) -> None:
    app, log = course_app(url)
    async with app:
        await log.execute(DefineCourse(course_id="c1", capacity=5))
        await log.execute(DefineCourse(course_id="c2", capacity=5))
        elsewhere = StudentSubscribed(student_id="s2", course_id="c2")
        racing = Interleaved(log, [[elsewhere]])
        res = await execute(
            racing, log.decider, SubscribeStudent(student_id="s1", course_id="c1"), options=NO_WAIT
        )
        assert res.attempts == 1
        assert await log.head() == 4


async def test_the_retry_decides_on_the_new_state(url: str) -> None:
    app, log = course_app(url)
    async with app:
        await log.execute(DefineCourse(course_id="c1", capacity=1))
        taken = StudentSubscribed(student_id="s2", course_id="c1")
        racing = Interleaved(log, [[taken]])
        with pytest.raises(rv.Rejected, match="course_full"):
            await execute(
                racing,
                log.decider,
                SubscribeStudent(student_id="s1", course_id="c1"),
                options=NO_WAIT,
            )
        assert [e for _, e, _ in await everything(log)][1:] == [taken]


async def test_conflicts_beyond_max_attempts_reach_the_caller_and_land_nothing(url: str) -> None:
    app, log = invoice_app(url)
    async with app:
        others = [[InvoiceCreated(number=n, customer="bob", amount_cents=1)] for n in (1, 2, 3)]
        racing = Interleaved(log, others)
        with pytest.raises(rv.AppendConditionError) as caught:
            await execute(
                racing, log.decider, CreateInvoice(customer="ada", amount_cents=5), options=NO_WAIT
            )
        assert caught.value.position == 3
        assert racing.reads == [0, 0, 1]
        assert [e.customer for _, e, _ in await everything(log)] == ["bob"] * 3  # type: ignore[attr-defined]


async def test_a_command_id_lands_once(url: str) -> None:
    app, log = invoice_app(url)
    async with app:
        first = await log.execute(CreateInvoice(customer="ada", amount_cents=5), command_id="i-1")
        await log.execute(CreateInvoice(customer="bob", amount_cents=5))
        again = await log.execute(CreateInvoice(customer="ada", amount_cents=5), command_id="i-1")
        assert again.duplicate and not first.duplicate
        assert (again.events, again.first_offset, again.last_offset) == (
            first.events,
            first.first_offset,
            first.last_offset,
        )
        assert [e.customer for _, e, _ in await everything(log)] == ["ada", "bob"]  # type: ignore[attr-defined]


async def test_a_twin_that_landed_first_is_the_answer_not_a_rejection(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("accounts", events=ACCOUNT_EVENTS)
    log.include(accounts)
    async with app:
        mine = AccountRegistered(account_id="a1", username="ada")
        # the twin (same command id, another process) lands between the read and the append
        racing = Interleaved(log, [[mine]], command_id="reg-1")
        res = await execute(
            racing,
            log.decider,
            RegisterAccount(account_id="a1", username="ada"),
            command_id="reg-1",
            options=NO_WAIT,
        )
        assert res.duplicate and res.events == (mine,)
        assert await log.head() == 1


async def test_a_twin_seen_in_the_read_is_the_answer_not_a_rejection(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("accounts", events=ACCOUNT_EVENTS)
    log.include(accounts)
    async with app:
        # the twin lands after the id lookup but before the read: the state then refuses it
        twin = await log.append(
            [AccountRegistered(account_id="a1", username="ada")], command_id="reg-1"
        )
        store_find = log.store.find_command
        calls = 0

        async def late(command_id: str) -> Any:
            nonlocal calls
            calls += 1
            return None if calls == 1 else await store_find(command_id)

        log.store.find_command = late  # type: ignore[method-assign]
        try:
            res = await log.execute(
                RegisterAccount(account_id="a1", username="ada"), command_id="reg-1"
            )
        finally:
            del log.store.find_command  # type: ignore[method-assign]
        assert res.duplicate and res.first_offset == twin.first_offset
        assert await log.head() == 1


async def test_a_command_id_used_on_an_aggregate_log_is_refused(url: str) -> None:
    from tests.model import Counter, Increment

    app = rv.App(store=url)
    counters = app.event_log(Counter)
    log = app.dcb_log("invoices", events=InvoiceCreated)
    log.include(invoices)
    async with app:
        await counters.execute("k", Increment(), command_id="same")
        with pytest.raises(rv.CommandIdReusedError):
            await log.execute(CreateInvoice(customer="ada", amount_cents=5), command_id="same")
        assert await log.head() == 0


async def test_deciding_nothing_appends_nothing(url: str) -> None:
    from examples.dcb.usernames import ChangeUsername

    app = rv.App(store=url)
    log = app.dcb_log("accounts", events=ACCOUNT_EVENTS)
    log.include(accounts)
    async with app:
        await log.execute(RegisterAccount(account_id="a1", username="ada"))
        res = await log.execute(ChangeUsername(account_id="a1", username="ada"), command_id="c")
        assert (res.events, res.first_offset, res.last_offset, res.position) == ((), 0, -1, 1)
        assert await log.head() == 1
        assert await log.store.find_command("c") is None


@pytest.mark.parametrize("queue", [False, True])
async def test_concurrent_decisions_in_one_process_keep_invoice_numbers_gapless(
    url: str, queue: bool
) -> None:
    app, log = invoice_app(url)
    async with app:
        opts = rv.DecideOptions(max_attempts=300, backoff_max=0.02, queue=queue)
        results = await asyncio.gather(
            *(
                log.execute(CreateInvoice(customer=f"c{i}", amount_cents=1), options=opts)
                for i in range(30)
            )
        )
        numbers = [e.number for _, e, _ in await everything(log)]  # type: ignore[attr-defined]
        assert numbers == list(range(1, 31))
        assert sorted(r.events[0].number for r in results) == numbers  # type: ignore[attr-defined]
        attempts = sum(r.attempts for r in results)
        if queue:  # they took turns in this process: no clash, no retry
            assert attempts == 30
        else:  # they clashed in the store, and retried
            assert attempts > 30


async def test_the_queue_lets_decisions_on_other_tags_run_at_once(url: str) -> None:
    app, log = course_app(url)
    async with app:
        for n in range(4):
            await log.execute(DefineCourse(course_id=f"c{n}", capacity=9))
        queue = log.__dict__["_queue"]
        results = await asyncio.gather(
            *(
                log.execute(SubscribeStudent(student_id=f"s{n}", course_id=f"c{n}"))
                for n in range(4)
            )
        )
        assert [r.attempts for r in results] == [1, 1, 1, 1]
        assert len(queue) == 0  # every key released
