"""The store side of DCB on SQLite (file, memory) and PostgreSQL: tags stored and indexed,
``read_query`` against the pure ``matches``, conditional appends that land nothing when
they fail, DCB logs and tagged aggregate logs seen by collectors, the relay and Arrow.

Every outcome is read back from the store."""

from __future__ import annotations

import asyncio
import itertools
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import reventless as rv
from reventless.errors import StoreError
from reventless.store import AppendRequest, SqlEventStore, require_sql
from reventless.store.dcb import first_match
from reventless.store.tagindex import tag_table
from reventless.tags import matches
from tests.dcb.store_model import (
    EVENTS,
    Close,
    Closed,
    CourseDefined,
    Graded,
    Level,
    NoteTaken,
    Open,
    Opened,
    StudentSubscribed,
    Ticket,
)
from tests.model import Counter, Incremented


@pytest.fixture
def url(any_url: str) -> str:
    """A fresh store of each kind: a SQLite file, SQLite in memory, a PostgreSQL schema."""
    return any_url


def sql_of(app: rv.App) -> SqlEventStore:
    return require_sql(app.store, "the DCB tests")


async def stored(app: rv.App, topic: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(offset, type, _tags text) of every row, and (tag, offset, type) of the tag index."""
    store = sql_of(app)
    table, tags = store.table_of(topic), tag_table(topic)

    def work(conn: Any) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        rows = conn.exec_driver_sql(f"SELECT _offset, _type, _tags FROM {table} ORDER BY 1").all()
        index = conn.exec_driver_sql(f"SELECT tag, _offset, _type FROM {tags} ORDER BY 2, 1").all()
        return [tuple(r) for r in rows], [tuple(r) for r in index]

    return await store.db.read(work)


# -- read_query == the pure filter (hypothesis) ----------------------------------------------

POOL = ["a:1", "a:2", "b:1", "course:c1", "student:s1", "student:s2"]
TYPES = [e.event_type for e in EVENTS]


@st.composite
def an_event(draw: st.DrawFn) -> tuple[rv.Event, list[str]]:
    kind = draw(st.sampled_from(TYPES))
    extra = draw(st.lists(st.sampled_from(POOL), max_size=2))
    if kind == "CourseDefined":
        return CourseDefined(course_id=draw(st.sampled_from(["c1", "c2"])), capacity=1), extra
    if kind == "StudentSubscribed":
        student, course = draw(st.sampled_from(["s1", "s2"])), draw(st.sampled_from(["c1", "c2"]))
        return StudentSubscribed(student_id=student, course_id=course), extra
    if kind == "Graded":
        return Graded(grade=draw(st.integers(1, 2)), level=Level.PRO), extra
    return NoteTaken(text="n"), extra


items = st.builds(
    rv.QueryItem,
    types=st.lists(st.sampled_from(TYPES), max_size=2).map(tuple),
    tags=st.lists(st.sampled_from([*POOL, "grade:1", "level:pro"]), max_size=2).map(tuple),
)
queries = st.lists(items, max_size=3).map(lambda xs: rv.Query(tuple(xs)))
_names = itertools.count()


async def _property(
    url: str,
    chunks: list[list[tuple[rv.Event, list[str]]]],
    query: rv.Query,
    after: int,
    limit: int | None,
) -> None:
    name = f"log{next(_names)}"  # a fresh log per example (one schema per test on PostgreSQL)
    app = rv.App(store=url)
    log = app.dcb_log(name, events=EVENTS)
    async with app:
        truth: list[tuple[str, tuple[str, ...]]] = []
        for chunk in chunks:
            events = [e for e, _ in chunk]
            await log.append(events, tags=[x for _, x in chunk])
            for e, extra in chunk:
                own = list(rv.tags.event_tags(e))
                truth.append((e.event_type, tuple(dict.fromkeys(own + extra))))
        want = [
            (i, t, tags)
            for i, (t, tags) in enumerate(truth, 1)
            if i > after and matches(query, t, tags)
        ][:limit]
        got = await log.read(query, after=after, limit=limit)
        assert [(e.offset, e.type, e.tags) for e in got] == want
        # the same query as a condition: fails at the first match, else lands
        head = await log.head()
        cond = rv.AppendCondition(query, after=after)
        first = next((i for i, t, tags in want), None) if limit != 0 else None
        if limit is None or limit > 0:
            if first is None:
                res = await log.append([NoteTaken(text="ok")], condition=cond)
                assert res.first_offset == head + 1
            else:
                with pytest.raises(rv.AppendConditionError) as failed:
                    await log.append([NoteTaken(text="no")], condition=cond)
                assert failed.value.position == first
                assert await log.head() == head


@pytest.mark.slow
@settings(max_examples=25)
@given(
    chunks=st.lists(
        st.lists(an_event(), min_size=1, max_size=20) | st.lists(an_event(), min_size=65),
        max_size=4,
    ).filter(lambda cs: sum(map(len, cs)) <= 120),
    query=queries,
    after=st.integers(0, 30),
    limit=st.none() | st.integers(1, 10),
)
def test_read_query_is_the_pure_filter(
    url: str,
    chunks: list[list[tuple[rv.Event, list[str]]]],
    query: rv.Query,
    after: int,
    limit: int | None,
) -> None:
    asyncio.run(_property(url, chunks, query, after, limit))


async def test_read_query_basics(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=EVENTS)
    async with app:
        assert await log.read(rv.Query.all()) == []
        await log.append([CourseDefined(course_id="c1", capacity=2)])
        await log.append(
            [
                StudentSubscribed(student_id="s1", course_id="c1"),
                StudentSubscribed(student_id="s2", course_id="c1"),
                NoteTaken(text="n"),
            ],
            tags=[["x:1"], [], ["course:c1"]],
        )
        got = await log.read(rv.Query.of(tags=["course:c1"]))
        assert [e.offset for e in got] == [1, 2, 3, 4]
        assert got[3].event == NoteTaken(text="n") and got[3].tags == ("course:c1",)
        assert got[1].tags == ("student:s1", "course:c1", "x:1")
        one = rv.Query.of(types=[StudentSubscribed], tags=["course:c1", "student:s2"])
        assert [e.offset for e in await log.read(one)] == [3]
        assert [e.offset for e in await log.read(rv.Query.all(), after=2, limit=1)] == [3]
        assert await log.read(rv.Query(())) == []
        assert await log.read(rv.Query.all(), limit=0) == []
        for bad in ({"after": -1}, {"limit": -1}, {"after": True}):
            with pytest.raises(StoreError):
                await log.read(rv.Query.all(), **bad)  # type: ignore[arg-type]
        rows, index = await stored(app, "courses")
        assert rows[1] == (2, "StudentSubscribed", '["student:s1","course:c1","x:1"]')
        assert ("x:1", 2, "StudentSubscribed") in index and len(index) == 7


# -- conditional appends --------------------------------------------------------------------


async def test_failed_condition_lands_nothing(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("users", events=EVENTS)
    async with app:
        claimed = rv.Query.of(tags=["student:s1"])
        first = await log.append(
            [StudentSubscribed(student_id="s1", course_id="c1")],
            condition=rv.AppendCondition(claimed),
            command_id="cmd-1",
        )
        assert (first.first_offset, first.last_offset) == (1, 1)
        before = await stored(app, "users")
        many = [StudentSubscribed(student_id="s1", course_id=f"c{i}") for i in range(40)]
        with pytest.raises(rv.AppendConditionError) as failed:
            await log.append(many, condition=rv.AppendCondition(claimed), command_id="cmd-2")
        assert failed.value.position == 1 and failed.value.topic == "users"
        assert failed.value.query == claimed
        # nothing landed: rows, tag index, head, command record
        assert await stored(app, "users") == before
        assert await log.head() == 1
        assert await app.store.find_command("cmd-2") is None
        # after the position it read, the same condition holds again
        ok = await log.append(many[:2], condition=rv.AppendCondition(claimed, after=1))
        assert (ok.first_offset, ok.last_offset) == (2, 3)
        # a retried command id is answered from its record, without a new append
        again = await log.append(
            [StudentSubscribed(student_id="s1", course_id="c1")],
            condition=rv.AppendCondition(claimed),
            command_id="cmd-1",
        )
        assert again.duplicate and (again.first_offset, again.last_offset) == (1, 1)
        assert await log.head() == 3


async def test_conditions_by_type_by_tags_and_match_all(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("c", events=EVENTS)
    async with app:
        await log.append([CourseDefined(course_id="c1", capacity=1), NoteTaken(text="x")])
        note = [NoteTaken(text="y")]
        for failing in (
            rv.Query.of(types=[CourseDefined]),
            rv.Query.of(types=[Graded, NoteTaken]),
            rv.Query.all(),
            rv.Query.of(tags=["a:1"]) | rv.Query.of(types=[NoteTaken], tags=[]),
        ):
            with pytest.raises(rv.AppendConditionError):
                await log.append(note, condition=rv.AppendCondition(failing))
        for holding in (
            rv.Query.of(types=[Graded]),
            rv.Query.of(types=[CourseDefined], tags=["course:c2"]),
            rv.Query.of(types=[NoteTaken], tags=["course:c1"]),
            rv.Query(()),  # matches nothing: never fails
            rv.Query.all(),  # ... after the head
        ):
            head = await log.head()
            res = await log.append(note, condition=rv.AppendCondition(holding, after=head))
            assert res.first_offset == head + 1
        assert await log.head() == 7


async def test_condition_only_on_dcb_logs_and_publish_refused(url: str) -> None:
    app = rv.App(store=url)
    tickets = app.event_log(Ticket)
    log = app.dcb_log("c", events=EVENTS)
    async with app:
        await tickets.execute("t1", Open(owner="ada"))
        rows = [r[1:] for r in await app.store.read("Ticket", 1, 10)]
        cond = rv.AppendCondition(rv.Query.all())
        request = AppendRequest("Ticket", rows, "t2", 0, condition=cond)
        with pytest.raises(StoreError, match="DCB logs"):
            await app.store.append(request)
        with pytest.raises(StoreError, match="DCB log"):
            await log.topic.publish([NoteTaken(text="x")])
        with pytest.raises(StoreError, match="not an event"):
            await log.append([Close(reason="x")])  # type: ignore[list-item]
        assert await app.store.head("Ticket") == 1 and await log.head() == 0


async def test_append_tags_argument(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("c", events=EVENTS)
    async with app:
        notes = [NoteTaken(text="1"), NoteTaken(text="2")]
        await log.append(notes, tags=["t:1", "t:2"])  # one list for every event
        await log.append(notes, tags=[["u:1"], []])  # one list per event
        got = await log.read(rv.Query.all())
        assert [e.tags for e in got] == [("t:1", "t:2"), ("t:1", "t:2"), ("u:1",), ()]
        for bad in ("t:1", [["a:1"]], [""], [["a:1"], "b:1"]):
            with pytest.raises(rv.MetadataError):
                await log.append(notes, tags=bad)  # type: ignore[arg-type]
        assert await log.head() == 4


async def test_an_append_with_thousands_of_distinct_tags(url: str) -> None:
    """One lock key per tag: more than a PostgreSQL SELECT list holds (1664) still lands,
    under a condition too, and the index has every tag."""
    app = rv.App(store=url)
    log = app.dcb_log("bulk", events=EVENTS)
    async with app:
        notes = [NoteTaken(text=str(i)) for i in range(2500)]
        cond = rv.AppendCondition(rv.Query.of(tags=["bulk:2499"]))
        res = await log.append(notes, tags=[[f"bulk:{i}"] for i in range(2500)], condition=cond)
        assert (res.first_offset, res.last_offset) == (1, 2500)
        _, index = await stored(app, "bulk")
        assert len(index) == 2500
        with pytest.raises(rv.AppendConditionError):
            await log.append([NoteTaken(text="x")], condition=cond)


async def test_condition_check_uses_the_indexes(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("plan", events=EVENTS)
    async with app:
        await log.append([CourseDefined(course_id="c1", capacity=1)])
        store = sql_of(app)
        info = store._entry("plan").info
        query = rv.Query.of(types=[StudentSubscribed], tags=["course:c1", "student:s1"])
        query |= rv.Query.of(types=[CourseDefined])
        sql, params = first_match(store.db, info, rv.AppendCondition(query, after=0))
        explain = "EXPLAIN QUERY PLAN " if store.db.is_sqlite else "EXPLAIN "

        def plan(conn: Any) -> str:
            cur = conn.connection.dbapi_connection.cursor()
            if not store.db.is_sqlite:
                cur.execute("SET enable_seqscan = off")  # tiny tables: ask for the index plan
            cur.execute(explain + sql, params)
            return "\n".join(str(r) for r in cur.fetchall())

        text = await store.db.read(plan)
        if store.db.is_sqlite:
            assert "USING PRIMARY KEY (tag=? AND _offset>?)" in text
            assert "USING COVERING INDEX ix_ev_plan_type (_type=? AND _offset>?)" in text
            assert "SCAN" not in text.replace("SCAN CONSTANT ROW", "")  # no table scan
        else:
            assert "pk_tg_plan" in text and "ix_ev_plan_type" in text
            assert "Seq Scan" not in text


# -- tagged aggregate logs, and the rest of reventless ---------------------------------------


async def test_aggregate_logs_with_tags(url: str) -> None:
    app = rv.App(store=url)
    tickets = app.event_log(Ticket)
    app.event_log(Counter)
    async with app:
        await tickets.execute("t1", Open(owner="ada"))
        await tickets.execute("t2", Open(owner="bob"))
        await tickets.execute("t1", Close(reason="done"))
        await tickets.execute_many([(f"m{i}", Open(owner="ada")) for i in range(70)])
        rows, index = await stored(app, "Ticket")
        assert rows[:3] == [
            (1, "Opened", '["owner:ada"]'),
            (2, "Opened", '["owner:bob"]'),
            (3, "Closed", "[]"),
        ]
        assert index[:2] == [("owner:ada", 1, "Opened"), ("owner:bob", 2, "Opened")]
        assert len(index) == 72
        ada = await app.store.read_query("Ticket", rv.Query.of(tags=["owner:ada"]))
        assert len(ada) == 71 and ada[0][0] == 1
        closed = await app.store.read_query("Ticket", rv.Query.of(types=["Closed"]))
        assert [r[0] for r in closed] == [3]
        assert [e.tags for e in await tickets.read(1, 3)] == [("owner:ada",), ("owner:bob",), ()]
        assert (await tickets.load("t1")).closed
        # tags given at append join the events' own
        res = await tickets.append("t9", [Opened(owner="cy")], expected_version=0, tags=["vip"])
        [vip] = await app.store.read_query("Ticket", rv.Query.of(tags=["vip"]))
        assert vip[0] == res.first_offset and vip[-1] == '["owner:cy","vip"]'
        with pytest.raises(rv.MetadataError):
            await tickets.append("t9", [Closed(reason="x")], expected_version=1, tags=[""])
        counters = app.event_log(Counter)
        with pytest.raises(StoreError, match="no tags"):
            await counters.append("c", [Incremented()], expected_version=0, tags=["x"])


class Seat(BaseModel):
    id: str
    course: str
    tags: list[str]


async def test_collectors_relay_and_arrow_see_dcb_logs(url: str) -> None:
    seats = rv.ReadModel("seats", row=Seat, key="id")

    @seats.on(StudentSubscribed)
    def _(env: rv.Envelope[StudentSubscribed]) -> rv.Upsert[Seat]:
        e = env.event
        return rv.Upsert(Seat(id=e.student_id, course=e.course_id, tags=list(env.tags)))

    app = rv.App(store=url)
    log = app.dcb_log("courses", events=EVENTS, partitions=2)
    view = app.collect(seats)
    async with app:
        assert list(app.topology().dispatch("seats")) == ["courses"]
        await log.append([CourseDefined(course_id="c1", capacity=2)])
        await log.append([StudentSubscribed(student_id="s1", course_id="c1")], tags=["x:1"])
        await log.append([StudentSubscribed(student_id="s2", course_id="c2")])
        await app.settle()
        s1 = await view.get("s1")
        assert s1 is not None and s1.tags == ["student:s1", "course:c1", "x:1"]
        assert (await view.get("s2")) is not None
        batches = [b async for b in log.topic.read_batches()]
        assert [t for b in batches for t in b.column("_tags").to_pylist()] == [
            ["course:c1"],
            ["student:s1", "course:c1", "x:1"],
            ["student:s2", "course:c2"],
        ]
        # an event's partition is its first tag's
        parts = [p for b in batches for p in b.column("_partition").to_pylist()]
        assert parts == [rv.partition_of(t, 2) for t in ("course:c1", "student:s1", "student:s2")]
        channels = app.topology().channels()
        assert channels.topics["courses"] == (2, frozenset(e.event_type for e in EVENTS))


# -- evolution and retention ----------------------------------------------------------------


class PostedV1(rv.Event):
    event_type = "Posted"
    author: str


class PostedV2(rv.Event):
    event_type = "Posted"
    author: Annotated[str, rv.Tag("author")]


class BoardV1(rv.Aggregate):
    topic_name = "Board"
    events = PostedV1

    @rv.applies(PostedV1)
    def _posted(self, e: PostedV1) -> None:
        pass


class BoardV2(rv.Aggregate):
    topic_name = "Board"
    events = PostedV2

    @rv.applies(PostedV2)
    def _posted(self, e: PostedV2) -> None:
        pass


@pytest.fixture
def lasting_url(shared_url: str) -> str:
    """A store that outlives its App: a SQLite file or a PostgreSQL schema."""
    return shared_url


async def test_an_aggregate_whose_events_gain_tags(lasting_url: str) -> None:
    app = rv.App(store=lasting_url)
    board = app.event_log(BoardV1)
    async with app:
        await board.append("b1", [PostedV1(author="ada")], expected_version=0)
    app = rv.App(store=lasting_url)
    board2 = app.event_log(BoardV2)
    async with app:  # the tags column is added (old events: no tags) with its index
        await board2.append("b1", [PostedV2(author="bob")], expected_version=1)
        assert [e.tags for e in await board2.read()] == [(), ("author:bob",)]
        rows, index = await stored(app, "Board")
        assert [r[2] for r in rows] == ["[]", '["author:bob"]']
        assert index == [("author:bob", 2, "Posted")]
        bob = await app.store.read_query("Board", rv.Query.of(tags=["author:bob"]))
        assert [r[0] for r in bob] == [2]
        db = require_sql(app.store, "the test").db
        if db.is_sqlite:  # the index was sorted in files, and the writer's setting is back
            temp_store = await db.write(lambda c: c.exec_driver_sql("PRAGMA temp_store").scalar())
            assert temp_store == 2


async def test_conditions_ignore_events_retention_deleted(lasting_url: str) -> None:
    app = rv.App(store=lasting_url)
    log = app.dcb_log("claims", events=EVENTS)
    async with app:
        await log.append([NoteTaken(text="old")], tags=["claimed:a"])
        await log.append([NoteTaken(text="new")], tags=["claimed:b"])
        retention = app.store.retention
        await retention.create_tables()
        await retention.set_policy("claims", max_age=None, max_count=1)
        assert await retention.apply((await retention.topics())["claims"], now=0.0) == 1
        _, index = await stored(app, "claims")  # the deleted event's index rows went too
        assert index == [("claimed:b", 2, "NoteTaken")]
        claim_a = rv.AppendCondition(rv.Query.of(tags=["claimed:a"]))
        assert await log.read(claim_a.query) == []
        res = await log.append([NoteTaken(text="again")], condition=claim_a, tags=["claimed:a"])
        assert res.first_offset == 3
        claim_b = rv.AppendCondition(rv.Query.of(tags=["claimed:b"]))
        with pytest.raises(rv.AppendConditionError):  # what retention kept still counts
            await log.append([NoteTaken(text="b")], condition=claim_b)


async def test_a_dcb_log_pinned_to_a_tenant(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("acme_claims", events=EVENTS, tenant="acme")
    async with app:
        await log.append([NoteTaken(text="mine")])  # stamped with the pinned tenant
        with pytest.raises(rv.TenantError):
            await log.append([NoteTaken(text="theirs")], meta=rv.Metadata(tenant="other"))
        [env] = await log.read(rv.Query.all())
        assert env.meta.tenant == "acme"
        assert await log.head() == 1  # the refused append landed nothing
