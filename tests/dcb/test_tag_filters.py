"""Filtering by tag: ``where="tag = 'course:c1'"`` on a DCB log and on a tagged aggregate
log. For random tagged events and random tag predicates, the SQL clause (run by the
database), the Arrow filter (on the batches read back) and the Python row filter select
exactly the offsets the pure oracle (``any(tag op value)``) selects, on SQLite and
PostgreSQL; a read model with a tag predicate sees exactly those events (live and catch-up),
and a gateway subscription's SQL pushdown keeps the same rows."""

from __future__ import annotations

import asyncio
import fnmatch
import json
from typing import Annotated, Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import reventless as rv
from reventless.predicate import Predicate, PredicateError
from reventless.store import require_sql


class Noted(rv.Event):
    topic_id: Annotated[str, rv.Tag("t")]
    n: int = 0


class Flagged(rv.Event):
    who: Annotated[str | None, rv.Tag("who")] = None


TAG_VALUES = ["a", "b", "c%", "_d"]
ROWS = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(TAG_VALUES),
        st.lists(st.sampled_from(["x:1", "x:2", "y:%"]), max_size=2, unique=True),
    ),
    min_size=1,
    max_size=10,
)


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


ALL_TAGS = ["t:a", "t:b", "t:c%", "t:_d", "x:1", "x:2", "y:%", "who:a", "zz"]
ATOMS = st.one_of(
    st.builds(lambda v: f"tag = {_q(v)}", st.sampled_from(ALL_TAGS)),
    st.builds(lambda v: f"tag <> {_q(v)}", st.sampled_from(ALL_TAGS)),
    st.builds(lambda v: f"tag >= {_q(v)}", st.sampled_from(ALL_TAGS)),
    st.builds(
        lambda vs: f"tag IN ({', '.join(map(_q, vs))})",
        st.lists(st.sampled_from(ALL_TAGS), min_size=1, max_size=3),
    ),
    st.builds(lambda p: f"tag LIKE {_q(p)}", st.sampled_from(["t:%", "x:_", "%\\%", "who:%", "%"])),
    st.builds(lambda p: f"tag NOT LIKE {_q(p)}", st.sampled_from(["t:%", "x:%"])),
    st.just("type = 'Noted'"),
)
PREDICATES = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ),
    max_leaves=5,
)


def _like(pattern: str) -> str:
    """LIKE -> fnmatch (patterns here use no brackets)."""
    out, it = [], iter(pattern)
    for ch in it:
        if ch == "\\":
            out.append("[" + next(it) + "]")
        else:
            out.append({"%": "*", "_": "?"}.get(ch, ch))
    return "".join(out)


def oracle(text: str, etype: str, tags: list[str]) -> bool:
    """The meaning of the predicate, evaluated by hand on one event (no NULLs here)."""
    node = sa_free(text)
    return bool(node(etype, tags))


def sa_free(text: str) -> Any:
    """A tiny evaluator of the generated predicate texts (a second implementation)."""
    import sqlglot
    from sqlglot import exp

    def ev(e: exp.Expression, etype: str, tags: list[str]) -> bool:
        if isinstance(e, exp.Paren):
            return ev(e.this, etype, tags)
        if isinstance(e, exp.And):
            return ev(e.this, etype, tags) and ev(e.expression, etype, tags)
        if isinstance(e, exp.Or):
            return ev(e.this, etype, tags) or ev(e.expression, etype, tags)
        if isinstance(e, exp.Not):
            return not ev(e.this, etype, tags)
        if isinstance(e, exp.EQ) and e.this.name == "type":
            return etype == e.expression.this
        if isinstance(e, exp.EQ):
            return e.expression.this in tags
        if isinstance(e, exp.NEQ):
            return any(t != e.expression.this for t in tags)
        if isinstance(e, exp.GTE):
            return any(t >= e.expression.this for t in tags)
        if isinstance(e, exp.In):
            return any(t in {v.this for v in e.expressions} for t in tags)
        if isinstance(e, exp.Like):
            hit = any(fnmatch.fnmatchcase(t, _like(e.expression.this)) for t in tags)
            return not hit if e.args.get("negate") else hit
        raise AssertionError(f"unexpected {e!r}")

    tree = sqlglot.parse_one(text)
    return lambda etype, tags: ev(tree, etype, tags)


def _equivalence(url: str) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("notes", events=Noted | Flagged)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.start())
    store = require_sql(app.store, "the tag filter test")
    table = store.table_of("notes")
    dialect = app.store.dialect

    @settings(max_examples=40, deadline=None)
    @given(rows=ROWS, texts=st.lists(PREDICATES, min_size=1, max_size=4))
    def check(rows: list[tuple[bool, str, list[str]]], texts: list[str]) -> None:
        events: list[rv.Event] = [
            Noted(topic_id=v) if noted else Flagged(who=None if v == "b" else v)
            for noted, v, _ in rows
        ]
        res = loop.run_until_complete(log.append(events, tags=[extra for _, _, extra in rows]))
        first, last = res.first_offset, res.last_offset

        async def batches() -> pa.Table:
            return pa.Table.from_batches(
                [b async for b in log.topic.read_batches(first, upto=last)], log.topic.arrow_schema
            )

        got = loop.run_until_complete(batches())
        truth_rows = list(
            zip(
                got.column("_offset").to_pylist(),
                got.column("_type").to_pylist(),
                got.column("_tags").to_pylist(),
                strict=True,
            )
        )
        assert any(tags for _, _, tags in truth_rows) or all(not r[2] for r in rows)
        stored = [tuple(r.values()) for r in got.to_pylist()]
        tags_at = got.column_names.index("_tags")
        for text in texts:
            p = Predicate.parse(text, log.schema)
            want = [o for o, etype, tags in truth_rows if oracle(text, etype, tags)]
            stmt = (
                sa.select(sa.column("_offset"))
                .select_from(sa.table(table))
                .where(sa.column("_offset").between(first, last), p.sql(dialect))
                .order_by(sa.column("_offset"))
            )
            in_sql = loop.run_until_complete(
                store.db.read(lambda c, s=stmt: [int(o) for (o,) in c.execute(s)])
            )
            in_arrow = p.filter_arrow(got).column("_offset").to_pylist()
            assert p.filter_arrow(got).column_names == got.column_names
            keep = p.row_filter(got.column_names)
            # the Python filter sees SQL values: the tags as JSON text
            in_py = [
                r[0]
                for r in stored
                if keep((*r[:tags_at], json.dumps(r[tags_at]), *r[tags_at + 1 :]))
            ]
            assert in_sql == in_arrow == in_py == want, text

    try:
        check()
    finally:
        loop.run_until_complete(app.stop())
        loop.close()


def test_tag_predicates_agree_sqlite(file_url: str) -> None:
    _equivalence(file_url)


@pytest.mark.postgres
def test_tag_predicates_agree_postgres(pg_url: str) -> None:
    _equivalence(pg_url)


def test_tag_predicate_errors() -> None:
    app = rv.App()
    log = app.dcb_log("notes", events=Noted | Flagged)
    with pytest.raises(PredicateError, match="never NULL"):
        Predicate.parse("tag IS NULL", log.schema)
    with pytest.raises(PredicateError, match="BETWEEN"):
        Predicate.parse("tag BETWEEN 'a' AND 'b'", log.schema)
    with pytest.raises(PredicateError, match="is text"):
        Predicate.parse("tag = 3", log.schema)
    plain = rv.TopicSchema.from_arrow("plain", pa.schema([pa.field("x", pa.int64())]))
    with pytest.raises(PredicateError, match="no filterable column 'tag'"):
        Predicate.parse("tag = 'a'", plain)


class Row(BaseModel):
    offset: int
    topic_id: str


async def _read_model_sees_tagged(url: str) -> None:
    notes_of_a = rv.ReadModel("notes_of_a", row=Row, key="offset", where="tag = 't:a'")

    @notes_of_a.on(Noted)
    def _(ev: rv.Envelope[Noted]) -> rv.Upsert[Row]:
        assert "t:a" in ev.tags
        return rv.Upsert(Row(offset=ev.offset, topic_id=ev.event.topic_id))

    app = rv.App(store=url)
    log = app.dcb_log("notes", events=Noted | Flagged)
    before = [Noted(topic_id="a"), Noted(topic_id="b"), Noted(topic_id="a", n=1)]
    async with app:
        await log.append(before)
    app2 = rv.App(store=url)
    log2 = app2.dcb_log("notes", events=Noted | Flagged)
    view = app2.collect(notes_of_a)
    async with app2:
        await app2.settle()  # catch-up from the store
        assert [r.offset for r in await view.all()] == [1, 3]
        await log2.append([Noted(topic_id="b"), Noted(topic_id="a", n=2), Flagged(who="a")])
        await app2.settle()  # live through the broker
        rows = sorted(r.offset for r in await view.all())
        assert rows == [1, 3, 5]
        assert (await view.lag()) == {"notes": 0}


def test_read_model_filters_by_tag_sqlite(file_url: str) -> None:
    asyncio.run(_read_model_sees_tagged(file_url))


@pytest.mark.postgres
def test_read_model_filters_by_tag_postgres(pg_url: str) -> None:
    asyncio.run(_read_model_sees_tagged(pg_url))


async def _subscription_by_tag(url: str) -> None:
    from reventless.subscribe import BadRequestError, Subscriptions

    app = rv.App(store=url)
    log = app.dcb_log("notes", events=Noted | Flagged)
    async with app:
        await log.append([Noted(topic_id="a"), Noted(topic_id="b"), Flagged(who="a")])
        await log.append([Noted(topic_id="c")], tags=["x:1"])
        async with Subscriptions.from_url(url) as subs:
            sub = await subs.create("notes", where="tag LIKE 't:%' AND NOT tag = 't:b'")
            page = await subs.poll(sub.id, limit=10)
            assert [(e["offset"], e["tags"]) for e in page.events] == [
                (1, ["t:a"]),
                (4, ["t:c", "x:1"]),
            ]
            assert page.events[0]["data"] == {"topic_id": "a", "n": 0, "who": None}
            only = await subs.create("notes", where="tag = 'who:a'", columns=["tags"])
            page = await subs.poll(only.id, limit=10)
            assert page.events == [{"offset": 3, "tags": ["who:a"]}]
            with pytest.raises(BadRequestError, match="unknown columns"):
                await subs.create("notes", columns=["_tags"])


def test_subscription_filters_by_tag_sqlite(file_url: str) -> None:
    asyncio.run(_subscription_by_tag(file_url))


@pytest.mark.postgres
def test_subscription_filters_by_tag_postgres(pg_url: str) -> None:
    asyncio.run(_subscription_by_tag(pg_url))
