"""Predicates: parsing and validation errors, and pushdown equivalence.

The property test appends random rows to a real store and checks, for random predicates,
that the SQL clause (run by the database), the Arrow expression (on the record batches read
back) and the Python row filter select exactly the same offsets.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from reventless.codec import META_NAMES
from reventless.subscribe import Predicate, PredicateError
from tests.subscribe.conftest import ORDERS, orders_app

SCHEMA = rv.TopicSchema.from_arrow("orders", ORDERS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "non-empty"),
        ("qty >", "malformed"),
        ("nope = 1", "no filterable column 'nope'"),
        ("qty = 'x'", "qty' is int"),
        ("name > 3", "name' is text"),
        ("flag < TRUE", "only = and <>"),
        ("name LIKE 'x\\'", "ends with an escape"),
        ("qty = NULL", "IS NULL"),
        ("qty IN (SELECT 1)", "literal"),
        ("qty = (SELECT 1)", "literal"),
        ("1; DROP TABLE ev_orders", "one expression"),
        ("qty = 1; DELETE FROM rv_topics", "one expression"),
        ("qty = 99999999999999999999", "64-bit"),
        ("produced_at > 'yesterday'", "ISO-8601"),
        ("qty + 1 = 2", "column name"),
        ("o.qty = 1", "column name"),
        ("lower(name) = 'x'", "column name"),
        ("name ILIKE 'x'", "unsupported"),
        ("x" * 5000, "longer than"),
    ],
)
def test_bad_predicates_raise_a_typed_error(text: str, message: str) -> None:
    with pytest.raises(PredicateError, match=message):
        Predicate.parse(text, SCHEMA)


def test_names_map_to_stored_columns() -> None:
    p = Predicate.parse(
        "type = 'orders' AND key LIKE 'o-%' AND offset > 3 AND tenant IS NULL "
        "AND produced_at >= '2024-01-01T00:00:00' AND _version IS NULL",
        SCHEMA,
    )
    assert p.columns == {
        "_type",
        "_aggregate_id",
        "_offset",
        "_tenant",
        "_produced_at",
        "_version",
    }
    # a field named like a short name wins over the metadata column
    shadow = rv.TopicSchema.from_arrow("t", pa.schema([pa.field("key", pa.int64())]))
    assert Predicate.parse("key = 1", shadow).columns == {"key"}
    assert Predicate.parse("_aggregate_id = 'x'", shadow).columns == {"_aggregate_id"}


def test_broker_filter_derives_types_and_partitions() -> None:
    p = Predicate.parse("type IN ('A', 'B') AND (partition = 1 OR partition = 3)", SCHEMA)
    bf = p.broker_filter()
    assert bf.event_types == {"A", "B"}
    assert bf.partitions == {1, 3}
    assert bf.nats_subjects("orders") == ["rv.orders.1", "rv.orders.3"]
    assert bf.sns_filter_policy() == {"rv-types": ["A", "B"]}
    loose = Predicate.parse("type = 'A' OR qty > 1", SCHEMA).broker_filter()
    assert loose.event_types is None and loose.sns_filter_policy() is None
    assert loose.nats_subjects("orders") == ["rv.orders.*"]
    both = Predicate.parse("type = 'A' AND type IN ('A', 'C')", SCHEMA).broker_filter()
    assert both.event_types == {"A"}


def test_sql_clause_binds_every_literal() -> None:
    evil = "x' OR '1'='1"
    p = Predicate.parse(f"name = '{evil.replace(chr(39), chr(39) * 2)}' OR qty IN (1, 2)", SCHEMA)
    compiled = p.sql("sqlite").compile()
    assert evil not in str(compiled)
    assert evil in compiled.params.values()


# -- pushdown equivalence on a real store -----------------------------------------------------

NAMES = st.text(alphabet="aB%_\\'", max_size=3)
ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a-1", "a-2", "b-1", "%x"]),
        st.none() | st.integers(-3, 3),
        st.none() | st.sampled_from([-1.5, 0.0, 0.5, 2.25, 3.0]),
        st.none() | st.booleans(),
        st.none() | NAMES,
    ),
    min_size=1,
    max_size=12,
)


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _like(s: str) -> str:
    return s[:-1] if (len(s) - len(s.rstrip("\\"))) % 2 else s


ATOMS = st.one_of(
    st.builds(
        lambda op, v: f"qty {op} {v}",
        st.sampled_from(["=", "<>", "<", ">=", "!="]),
        st.integers(-3, 3),
    ),
    st.builds(
        lambda op, v: f"total {op} {v}",
        st.sampled_from(["=", "<", ">", "<="]),
        st.sampled_from(["0", "0.5", "-1.5", "2.25", "2"]),
    ),
    st.builds(lambda v: f"flag = {v}", st.sampled_from(["TRUE", "FALSE"])),
    st.builds(lambda c: f"{c} IS NULL", st.sampled_from(["qty", "total", "flag", "name"])),
    st.builds(lambda c: f"{c} IS NOT NULL", st.sampled_from(["qty", "name"])),
    st.builds(
        lambda v: f"name {v[0]} {_q(_like(v[1]))}",
        st.tuples(st.sampled_from(["LIKE", "NOT LIKE"]), NAMES),
    ),
    st.builds(lambda op, v: f"name {op} {_q(v)}", st.sampled_from(["=", "<", ">="]), NAMES),
    st.builds(
        lambda vs: f"qty IN ({', '.join(map(str, vs))})",
        st.lists(st.integers(-3, 3), min_size=1, max_size=3),
    ),
    st.builds(
        lambda vs: f"name NOT IN ({', '.join(map(_q, vs))})",
        st.lists(NAMES, min_size=1, max_size=2),
    ),
    st.builds(lambda v: f"key LIKE {_q(v)}", st.sampled_from(["a-%", "\\%%", "_-1"])),
    st.builds(lambda v: f"partition = {v}", st.integers(0, 2)),
    st.just("type = 'orders'"),
    st.builds(lambda a, b: f"qty BETWEEN {a} AND {b}", st.integers(-3, 1), st.integers(0, 3)),
)
PREDICATES = st.recursive(
    ATOMS,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ),
    max_leaves=6,
)


def _equivalence(url: str) -> None:
    app, topic = orders_app(url, partitions=3)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.start())
    table = app.store.table_of("orders")
    dialect = "sqlite" if app.store.db.is_sqlite else "postgresql"

    @settings(max_examples=60)
    @given(rows=ROWS, texts=st.lists(PREDICATES, min_size=1, max_size=4))
    def check(rows: list[tuple[Any, ...]], texts: list[str]) -> None:
        data = pa.Table.from_pylist([dict(zip(ORDERS.names, r, strict=True)) for r in rows], ORDERS)
        res = loop.run_until_complete(topic.publish(data))
        first, last = res.first_offset, res.last_offset

        async def batches() -> pa.Table:
            return pa.Table.from_batches(
                [b async for b in topic.read_batches(first, upto=last)], topic.arrow_schema
            )

        got = loop.run_until_complete(batches())
        stored = [tuple(r.values()) for r in got.to_pylist()]
        for text in texts:
            p = Predicate.parse(text, topic.schema)
            stmt = (
                sa.select(sa.column("_offset"))
                .select_from(sa.table(table))
                .where(sa.column("_offset").between(first, last), p.sql(dialect))
                .order_by(sa.column("_offset"))
            )
            in_sql = loop.run_until_complete(
                app.store.db.read(lambda c, s=stmt: [int(o) for (o,) in c.execute(s)])
            )
            in_arrow = got.filter(p.arrow()).column("_offset").to_pylist()
            keep = p.row_filter(got.column_names)
            # the Python filter sees SQL values: produced_at as epoch micros
            in_py = [r[0] for r in _sql_rows(stored) if keep(r)]
            assert in_sql == in_arrow == in_py, text

    try:
        check()
    finally:
        loop.run_until_complete(app.stop())
        loop.close()


def _sql_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    at = META_NAMES.index("_produced_at")
    out = []
    for r in rows:
        r = list(r)
        r[at] = int(r[at].timestamp() * 1_000_000)
        out.append(tuple(r))
    return out


def test_sql_arrow_and_python_agree_sqlite(file_url: str) -> None:
    _equivalence(file_url)


@pytest.mark.postgres
def test_sql_arrow_and_python_agree_postgres(pg_url: str) -> None:
    _equivalence(pg_url)
