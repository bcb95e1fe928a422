"""The bulk event encoder (``subscribe/encode.py``) writes exactly the JSON the per-event
path wrote before it: ``legacy_events`` below is that path, verbatim, and every test
compares the two on rows read back from a real store (or built as the store holds them)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from reventless.codec import META_NAMES, TopicSchema
from reventless.subscribe import Subscriptions
from reventless.subscribe.catalog import TopicInfo
from reventless.subscribe.encode import EVENT_NAMES, encode_events, to_json_value


def legacy_events(
    info: TopicInfo, rows: Sequence[Sequence[Any]], columns: Sequence[str] | None
) -> list[dict[str, Any]]:
    """The per-event encoder the gateway used before the bulk one (the reference)."""
    if not rows:
        return []
    decoded = info.schema.to_arrow([tuple(r) for r in rows]).to_pylist()
    json_cols = {c.name for c in info.schema.columns if c.sql_kind == "json"}
    fields = [c.name for c in info.schema.columns]
    keep = None if columns is None else set(columns) | {"offset"}
    out = []
    for d in decoded:
        ev: dict[str, Any] = {}
        for stored, name in EVENT_NAMES.items():
            if stored != "_row_idx" and (keep is None or name in keep):
                ev[name] = to_json_value(d[stored])
        data = {}
        for f in fields:
            if keep is not None and f not in keep:
                continue
            v = d[f]
            if f in json_cols and isinstance(v, str):
                v = json.loads(v)
            data[f] = to_json_value(v)
        if data or keep is None:
            ev["data"] = data
        out.append(ev)
    return out


def sse_json(ev: dict[str, Any]) -> str:
    """What ``gateway/sse.py`` wrote into a frame's ``data:`` line before."""
    return json.dumps(ev, separators=(",", ":"))


ALL = pa.schema(
    [
        pa.field("k", pa.string()),
        pa.field("i8", pa.int8()),
        pa.field("i32", pa.int32()),
        pa.field("i64", pa.int64()),
        pa.field("u64", pa.uint64()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("text", pa.string()),
        pa.field("big_text", pa.large_string()),
        pa.field("blob", pa.binary()),
        pa.field("big_blob", pa.large_binary()),
        pa.field("fixed", pa.binary(3)),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("ts_ms", pa.timestamp("ms")),
        pa.field("ts_s", pa.timestamp("s", tz="UTC")),
        pa.field("ts_ns", pa.timestamp("ns", tz="UTC")),
        pa.field("ts_paris", pa.timestamp("us", tz="Europe/Paris")),
        pa.field("day", pa.date32()),
        pa.field("day64", pa.date64()),
        pa.field("at", pa.time64("us")),
        pa.field("at_ms", pa.time32("ms")),
        pa.field("took", pa.duration("us")),
        pa.field("took_s", pa.duration("s")),
        pa.field("took_ms", pa.duration("ms")),
        pa.field("price", pa.decimal128(12, 3)),
        pa.field("doc", pa.string(), metadata={"reventless.encoding": "json"}),
        pa.field(
            "nested",
            pa.struct(
                [
                    pa.field("when", pa.timestamp("us", tz="UTC")),
                    pa.field("raw", pa.binary()),
                    pa.field("n", pa.int64()),
                    pa.field("tags", pa.list_(pa.string())),
                ]
            ),
        ),
        pa.field("nums", pa.list_(pa.int64())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)

_T0 = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)
_VALUES: dict[str, list[Any]] = {
    "i8": [-128, 127, 0],
    "i32": [-(2**31), 2**31 - 1, 7],
    "i64": [-(2**63), 2**63 - 1, 0],
    "u64": [2**63 - 1, 0, 1],  # SQLite stores signed 64-bit
    "f32": [0.1, float("inf"), -0.0],
    "f64": [0.1, float("nan"), 1e16],
    "flag": [True, False, True],
    # control characters, quotes, %, non-ASCII (PostgreSQL text holds no NUL)
    "text": ['quote " back \\ % %s', "é ü 中文 \U0001f600", "\x01\n\t\x1f"],
    "big_text": ["", "x" * 300, "{}"],
    "blob": [b"\x00\xff\xfe", b"", b"hello"],
    "big_blob": [b"\xfb\xff", b"a", b"??>"],
    "fixed": [b"abc", b"\x00\x00\x00", b"\xff\xfe\xfd"],
    "ts": [
        _T0,
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
    ],
    "ts_ms": [datetime(2024, 1, 1, 0, 0, 0, 5000), datetime(1999, 12, 31), datetime(9999, 1, 1)],
    "ts_s": [
        datetime(2024, 1, 1, 12, tzinfo=UTC),
        datetime(1950, 6, 1, tzinfo=UTC),
        _T0.replace(microsecond=0),
    ],
    "ts_ns": [_T0, _T0.replace(microsecond=0), _T0],
    "ts_paris": [_T0, datetime(2024, 7, 1, tzinfo=UTC), _T0],
    "day": [date(2024, 2, 29), date(1, 1, 1), date(9999, 12, 31)],
    "day64": [date(2024, 2, 29), date(1970, 1, 1), date(1900, 3, 1)],
    "at": [time(0, 0), time(23, 59, 59, 999999), time(12, 30, 0, 1)],
    "at_ms": [time(1, 2, 3, 4000), time(0, 0), time(23, 59, 59)],
    "took": [timedelta(microseconds=1), timedelta(days=-1, seconds=5), timedelta(0)],
    "took_s": [timedelta(seconds=90), timedelta(seconds=-1), timedelta(days=3)],
    "took_ms": [timedelta(milliseconds=1500), timedelta(0), timedelta(milliseconds=-7)],
    "price": [Decimal("1.500"), Decimal("-0.001"), Decimal("123456789.000")],
    "doc": ['{"b": 1, "a": [1.5, "é", null]}', '"just text"', "[]"],
    "nested": [
        {"when": _T0, "raw": b"\xfb\xff", "n": 1, "tags": ["a", "b"]},
        {"when": None, "raw": None, "n": None, "tags": None},
        {"when": datetime(2000, 1, 1, tzinfo=UTC), "raw": b"", "n": -5, "tags": []},
    ],
    "nums": [[1, 2, 3], [], [None, 4]],
    "attrs": [[("a", 1), ("b", None)], [], [("z", 0)]],
}


def all_types_table(n: int) -> pa.Table:
    """``n`` rows with every column type; row ``i`` holds edge value ``i % 3`` and every
    fourth row holds nulls in all nullable columns."""
    cols: dict[str, list[Any]] = {"k": [f"k{i % 3}" for i in range(n)]}
    for name, values in _VALUES.items():
        cols[name] = [None if i % 4 == 3 else values[i % 3] for i in range(n)]
    return pa.table(cols, schema=ALL)


async def stored_rows(url: str, table: pa.Table) -> tuple[TopicInfo, list[Any]]:
    """Publish ``table`` to topic ``all`` and read its stored rows back."""
    app = rv.App(store=url)
    topic = app.topic("all", schema=ALL, key="k")
    async with app:
        await topic.publish(table)
        async with Subscriptions.from_url(url) as subs:
            sub = await subs.create("all")
            info = await subs.topic("all")
            got = await subs.store.read(info, 1, subs.where(info, sub), 1000, rows=True)
    return info, list(got.rows)


PROJECTIONS: list[list[str] | None] = [
    None,
    ["offset"],
    ["i64"],
    ["key", "produced_at", "ts", "blob", "nested"],
    ["type", "version", "tenant", "partition", "msg_id"],
    ["doc", "attrs", "f64", "price", "took_s", "at_ms", "ts_paris", "ts_ns"],
    [*(EVENT_NAMES[n] for n in META_NAMES if n in EVENT_NAMES)],
    [c.name for c in ALL if c.name != "k"],
]


@pytest.mark.parametrize("columns", PROJECTIONS, ids=lambda c: "all" if c is None else ",".join(c))
async def test_bulk_json_is_the_per_event_json(db_url: str, columns: list[str] | None) -> None:
    info, rows = await stored_rows(db_url, all_types_table(12))
    assert len(rows) == 12
    old = legacy_events(info, rows, columns)
    new = encode_events(info.schema, rows, columns)
    for got, want in zip(new.texts, old, strict=True):
        assert got == sse_json(want)  # byte for byte what the SSE stream sent
    assert new.offsets == [ev["offset"] for ev in old] == list(range(1, 13))
    # the dicts the Python API and the JSON endpoints return: the same JSON values
    assert [sse_json(ev) for ev in new.dicts()] == [sse_json(ev) for ev in old]


async def test_polls_return_the_per_event_json(db_url: str) -> None:
    """End to end: ``Subscriptions.poll`` pages hold the reference JSON."""
    info, rows = await stored_rows(db_url, all_types_table(5))
    async with Subscriptions.from_url(db_url) as subs:
        sub = await subs.create("all")
        page = await subs.poll(sub.id, limit=100, columns=["offset", "ts", "blob"])
        assert page.encoded.texts == [
            sse_json(ev) for ev in legacy_events(info, rows, ["ts", "blob"])
        ]
        assert page.events == [
            {"offset": 1, "data": {"ts": "2024-02-29T23:59:58.123456+00:00", "blob": "AP/+"}},
            {"offset": 2, "data": {"ts": "1969-12-31T23:59:59.999999+00:00", "blob": ""}},
            {"offset": 3, "data": {"ts": "0001-01-01T00:00:00+00:00", "blob": "aGVsbG8="}},
            {"offset": 4, "data": {"ts": None, "blob": None}},
            {"offset": 5, "data": {"ts": "1969-12-31T23:59:59.999999+00:00", "blob": ""}},
        ]


SMALL = pa.schema(
    [
        pa.field("s", pa.string()),
        pa.field("n", pa.int64()),
        pa.field("x", pa.float64()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.duration("us")),
    ]
)
SMALL_TOPIC = TopicSchema.from_arrow("small", SMALL)
_DAYS = timedelta(days=10**5)


def _meta(i: int, key: str | None, micros: int) -> tuple[Any, ...]:
    # _offset, _row_idx, _produced_at, _aggregate_id, _version, _type, _schema_version,
    # _msg_id, _correlation_id, _causation_id, _user, _service, _ip, _tenant, _partition, _trace
    assert len(META_NAMES) == 16
    return (i, 0, micros, key, i, "", 1, f"m{i}", None, None, key, None, None, None, 0, None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.text(),
            st.none() | st.integers(-(2**63), 2**63 - 1),
            st.none() | st.floats(allow_nan=True, allow_infinity=True),
            st.none() | st.datetimes(timezones=st.just(UTC)),
            st.none()
            | st.timedeltas(min_value=timedelta(days=-(10**5)), max_value=timedelta(days=10**5)),
            st.integers(-(2**52), 2**52),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([None, ["s"], ["x", "t"], ["key", "user", "n", "d"], ["produced_at"]]),
)
def test_bulk_json_matches_on_any_values(
    values: list[tuple[Any, ...]], columns: list[str] | None
) -> None:
    fields = SMALL_TOPIC.from_arrow_rows(
        pa.table({n: [v[j] for v in values] for j, n in enumerate(SMALL.names)}, schema=SMALL),
        with_meta=False,
    )
    rows = [
        (*_meta(i + 1, v[0], v[5]), *f) for i, (v, f) in enumerate(zip(values, fields, strict=True))
    ]
    info = TopicInfo("small", "t_small", SMALL_TOPIC, 1, None)
    want = [sse_json(ev) for ev in legacy_events(info, rows, columns)]
    assert encode_events(SMALL_TOPIC, rows, columns).texts == want
