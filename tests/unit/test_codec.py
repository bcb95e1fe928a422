"""Contracts of reventless.codec: model <-> SQL values <-> Arrow <-> Parquet."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import itertools
import os
import subprocess
import sys
import textwrap
import typing
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, create_model

from reventless.codec import META_FIELDS, META_NAMES, META_SQL_KINDS, TopicSchema
from reventless.errors import (
    ReservedNameError,
    SchemaMismatchError,
    SpecError,
    UnknownEventTypeError,
)
from reventless.spec import Event

# -- generated event models ------------------------------------------------------------------

I64 = st.integers(-(2**63), 2**63 - 1)
OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59)
AWARE = st.datetimes(
    min_value=dt.datetime(2, 1, 1),
    max_value=dt.datetime(9998, 12, 31),
    timezones=OFFSETS.map(lambda m: dt.timezone(dt.timedelta(minutes=m))),
)
JSON = st.recursive(
    st.none() | st.booleans() | I64 | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=4,
)
MONEY_MAX = decimal.Decimal("999999999.999")
Money = Annotated[decimal.Decimal, Field(max_digits=12, decimal_places=3)]


class Color(enum.StrEnum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    DEEP = -(2**40)


# dynamic annotations, built at run time
List, Tuple, Opt = typing.cast(Any, list), typing.cast(Any, tuple), typing.cast(Any, Optional)

# A kind is (annotation, strategy factory). The factory takes the JSON bytes context:
# "top" (a blob column), "utf8" (pydantic's default for bare containers, so only UTF-8
# bytes serialise) or "b64" (inside the generated models, configured for base64).
Kind = tuple[Any, Callable[[str], st.SearchStrategy[Any]]]


def _fixed(ann: Any, strategy: st.SearchStrategy[Any]) -> Kind:
    return ann, lambda ctx: strategy


SCALARS: list[Kind] = [
    _fixed(str, st.text(max_size=12)),
    _fixed(int, I64),
    _fixed(float, st.floats(allow_nan=False, allow_infinity=False)),
    _fixed(bool, st.booleans()),
    (
        bytes,
        lambda ctx: st.text(max_size=6).map(str.encode) if ctx == "utf8" else st.binary(max_size=8),
    ),
    _fixed(dt.datetime, AWARE),
    _fixed(dt.date, st.dates()),
    _fixed(dt.time, st.times()),
    _fixed(dt.timedelta, st.timedeltas(-dt.timedelta(days=10**5), dt.timedelta(days=10**5))),
    _fixed(Money, st.decimals(-MONEY_MAX, MONEY_MAX, places=3)),
    _fixed(decimal.Decimal, st.decimals(allow_nan=False, allow_infinity=False)),
    _fixed(uuid.UUID, st.uuids()),
    _fixed(Color, st.sampled_from(Color)),
    _fixed(Level, st.sampled_from(Level)),
    _fixed(dict[str, int], st.dictionaries(st.text(max_size=4), I64, max_size=3)),
    _fixed(Any, JSON),
    _fixed(int | str, I64 | st.text(max_size=4)),
]
_names = itertools.count()


def _nested(kinds: list[Kind]) -> Kind:
    config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
    fields: Any = {f"n{i}": (ann, ...) for i, (ann, _) in enumerate(kinds)}
    model = create_model(f"Nested{next(_names)}", __config__=config, **fields)

    def strategy(ctx: str) -> st.SearchStrategy[Any]:
        parts = {f"n{i}": make("b64") for i, (_, make) in enumerate(kinds)}
        return st.fixed_dictionaries(parts).map(lambda kw: model(**kw))

    return model, strategy


def _extend(inner: st.SearchStrategy[Kind]) -> st.SearchStrategy[Kind]:
    def in_list(ctx: str) -> str:
        return "utf8" if ctx == "top" else ctx

    return st.one_of(
        inner.map(lambda k: (Opt[k[0]], lambda ctx: st.none() | k[1](ctx))),
        inner.map(lambda k: (List[k[0]], lambda ctx: st.lists(k[1](in_list(ctx)), max_size=3))),
        inner.map(
            lambda k: (
                Tuple[k[0], ...],
                lambda ctx: st.lists(k[1](in_list(ctx)), max_size=3).map(tuple),
            )
        ),
        st.lists(inner, min_size=1, max_size=3).map(_nested),
    )


KINDS = st.recursive(st.sampled_from(SCALARS), _extend, max_leaves=5)


def _event(prefix: str, kinds: list[Kind], shared: Kind | None = None) -> type[Event]:
    fields: Any = {f"{prefix}{i}": (ann, ...) for i, (ann, _) in enumerate(kinds)}
    if shared is not None:
        fields["shared"] = (shared[0], ...)
    model: type[Event] = create_model(f"Ev{next(_names)}", __base__=Event, **fields)
    return model


def _instances(model: type[Event], kinds: list[Kind], shared: Kind | None) -> Any:
    names = list(model.model_fields)[: len(kinds)]
    parts = {name: make("top") for name, (_, make) in zip(names, kinds, strict=True)}
    if shared is not None:
        parts["shared"] = shared[1]("top")
    return st.fixed_dictionaries(parts).map(lambda kw: model(**kw))


def _meta(offset: int, produced: int, type_name: str) -> tuple[Any, ...]:
    agg, msg = f"a-{offset}", f"m-{offset}"
    return (
        offset,
        0,
        produced,
        agg,
        offset,
        type_name,
        1,
        msg,
        "c",
        None,
        None,
        None,
        None,
        "t",
        0,
        None,
    )


def _walk_types(t: Any) -> list[Any]:
    out = [t]
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            out += _walk_types(t.field(i).type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out += _walk_types(t.value_type)
    elif pa.types.is_map(t):
        out += _walk_types(t.key_type) + _walk_types(t.item_type)
    return out


def _assert_spark_safe(schema: pa.Schema) -> None:
    for f in schema:
        for t in _walk_types(f.type):
            assert not isinstance(t, pa.UnionType | pa.ExtensionType), f.name
            assert not pa.types.is_dictionary(t), f.name


@settings(
    max_examples=int(os.environ.get("CODEC_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(data=st.data())
def test_round_trip_sql_arrow_parquet(tmp_path: Path, data: st.DataObject) -> None:
    kinds_a = data.draw(st.lists(KINDS, min_size=1, max_size=4), label="a")
    kinds_b = data.draw(st.lists(KINDS, max_size=2), label="b")
    shared = data.draw(KINDS, label="shared")
    a, b = _event("a", kinds_a, shared), _event("b", kinds_b, shared)
    topic = TopicSchema.from_events("gen", [b, a])
    _assert_spark_safe(topic.arrow_schema)
    assert all(c.nullable for c in topic.columns)
    assert [c.name for c in topic.columns].count("shared") == 1
    # the stored Arrow schema alone rebuilds the same columns (a row-dict view of the topic)
    fields_only = pa.schema(list(topic.arrow_schema)[len(META_FIELDS) :])
    view = TopicSchema.from_arrow("gen", fields_only)
    assert view.fingerprint == topic.fingerprint

    events = [data.draw(_instances(a, kinds_a, shared)) for _ in range(2)]
    events.append(data.draw(_instances(b, kinds_b, shared)))
    rows = []
    for i, e in enumerate(events):
        values = topic.encoder(e.event_type)(e)
        assert len(values) == len(topic.columns)
        assert topic.decode(e.event_type, values) == e
        # row-dict codecs agree with the model codecs
        again = view.encoder("")(view.decode("", values))
        assert topic.decode(e.event_type, again) == e
        produced = data.draw(st.integers(0, 2**52), label="produced_at")
        rows.append((*_meta(i + 1, produced, e.event_type), *values))

    batch = topic.to_arrow(rows)
    assert batch.schema.equals(topic.arrow_schema, check_metadata=True)
    batch.validate(full=True)
    back = topic.from_arrow_rows(batch, with_meta=True)
    assert [r[: len(META_NAMES)] for r in back] == [r[: len(META_NAMES)] for r in rows]
    decoded = [topic.decode(r[5], r[len(META_NAMES) :]) for r in back]
    assert decoded == events

    path = tmp_path / "gen.parquet"
    pq.write_table(pa.Table.from_batches([batch]), path)
    table = pq.read_table(path)
    assert table.schema == topic.arrow_schema
    assert table.to_pylist() == batch.to_pylist()
    from_parquet = topic.from_arrow_rows(table, with_meta=True)
    assert [topic.decode(r[5], r[len(META_NAMES) :]) for r in from_parquet] == events

    single = TopicSchema.from_model("one", a)  # nullability from the annotations
    assert [c.nullable for c in single.columns] == [
        single.arrow_schema.field(c.name).nullable for c in single.columns
    ]
    for e in events[:2]:
        assert single.decode(a.__name__, single.encoder(a.__name__)(e)) == e


# -- determinism -----------------------------------------------------------------------------

SPEC_SRC = textwrap.dedent(
    """
    import datetime as dt, decimal, typing
    from pydantic import BaseModel, Field
    from reventless.spec import Event

    class Line(BaseModel):
        sku: str
        qty: int
        price: typing.Annotated[decimal.Decimal, Field(max_digits=10, decimal_places=2)]

    class Placed(Event):
        order_id: str
        lines: list[Line]
        at: dt.datetime
        note: typing.Any = None

    class Shipped(Event):
        order_id: str
        carrier: str | None = None
        extra: int | str = 0

    class Cancelled(Event):
        order_id: str
        reason: dict[str, list[float]]
    """
)


def _spec() -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec(compile(SPEC_SRC, "<spec>", "exec", dont_inherit=True), ns)
    return ns


def test_schema_and_fingerprint_are_deterministic() -> None:
    ns = _spec()
    events = [ns["Placed"], ns["Shipped"], ns["Cancelled"]]
    first = TopicSchema.from_events("orders", events)
    for order in itertools.permutations(events):
        other = TopicSchema.from_events("orders", list(order))
        assert other.arrow_schema.equals(first.arrow_schema, check_metadata=True)
        assert other.fingerprint == first.fingerprint
    # columns: events by event_type (Cancelled, Placed, Shipped), fields in declaration order
    names = [c.name for c in first.columns]
    assert names == ["order_id", "reason", "lines", "at", "note", "carrier", "extra"]
    assert first.arrow_schema.names == [*META_NAMES, *names]
    assert list(first.arrow_schema)[: len(META_FIELDS)] == list(META_FIELDS)
    _assert_spark_safe(first.arrow_schema)
    assert first.arrow_schema.field("note").metadata == {b"reventless.encoding": b"json"}
    line = first.arrow_schema.field("lines").type.value_type
    assert line.field("price").type == pa.decimal128(10, 2)
    assert first.arrow_schema.field("at").type == pa.timestamp("us", tz="UTC")
    reason = first.arrow_schema.field("reason").type
    assert str(reason) == "map<string, list<element: double not null>>"
    assert not reason.item_field.nullable
    assert TopicSchema.from_events("orders2", events).fingerprint != first.fingerprint

    # the same spec in a fresh interpreter with another hash seed gives the same fingerprint
    script = SPEC_SRC + textwrap.dedent(
        """
        from reventless.codec import TopicSchema
        print(TopicSchema.from_events("orders", [Shipped, Cancelled, Placed]).fingerprint)
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == first.fingerprint


def test_meta_fields_contract() -> None:
    assert META_NAMES[:3] == ("_offset", "_row_idx", "_produced_at")
    assert len(META_FIELDS) == len(META_NAMES) == len(META_SQL_KINDS) == 16
    assert META_FIELDS[2].type == pa.timestamp("us", tz="UTC")
    not_null = {f.name for f in META_FIELDS if not f.nullable}
    assert not_null == {
        "_offset",
        "_row_idx",
        "_produced_at",
        "_type",
        "_schema_version",
        "_msg_id",
        "_partition",
    }
    ints = {n for n, k in zip(META_NAMES, META_SQL_KINDS, strict=True) if k == "int"}
    assert ints == {
        "_offset",
        "_row_idx",
        "_produced_at",
        "_version",
        "_schema_version",
        "_partition",
    }


# -- conventions and errors ------------------------------------------------------------------


class Stamp(Event):
    at: dt.datetime
    day: dt.date
    wait: dt.timedelta
    flag: bool
    blob: bytes
    count: int = 7  # added later: older rows hold NULL


def test_sql_value_conventions() -> None:
    topic = TopicSchema.from_events("stamps", [Stamp])
    naive = Stamp(
        at=dt.datetime(2024, 5, 6, 7, 8, 9),
        day=dt.date(2024, 5, 6),
        wait=dt.timedelta(0),
        flag=True,
        blob=b"x",
    )
    values = topic.encoder("Stamp")(naive)
    assert values[0] == "2024-05-06T07:08:09.000000+00:00"  # naive datetimes are UTC
    plus2 = dt.datetime(2024, 5, 6, 9, 8, 9, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert topic.encoder("Stamp")(naive.model_copy(update={"at": plus2}))[0] == (
        "2024-05-06T07:08:09.000005+00:00"
    )
    assert values[1:] == ("2024-05-06", 0, True, b"x", 7)
    # as SQLite hands them back: bool as 0/1, a blob as memoryview, a NULL for the new field
    back = topic.decode("Stamp", (values[0], values[1], 90, 1, memoryview(b"x"), None))
    assert back.at == dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
    assert back.at.utcoffset() == dt.timedelta(0)
    assert (back.wait, back.flag, back.blob, back.count) == (
        dt.timedelta(microseconds=90),
        True,
        b"x",
        7,
    )
    with pytest.raises(SchemaMismatchError, match="count"):
        topic.encoder("Stamp")(naive.model_copy(update={"count": 2**63}))


class Priced(Event):
    amount: int


class PricedText(Event):
    amount: str


class Tagged1(Event):
    tags: list[int]


class Tagged2(Event):
    tags: list[str]


class Tagged3(Event):
    tags: list[int] | None = None


def test_conflicting_field_types_are_rejected() -> None:
    with pytest.raises(SpecError, match=r"amount.*Priced.*PricedText"):
        TopicSchema.from_events("prices", [PricedText, Priced])
    with pytest.raises(SpecError, match=r"tags.*Tagged1.*Tagged2"):
        TopicSchema.from_events("tags", [Tagged2, Tagged1])
    shared = TopicSchema.from_events("tags", [Tagged3, Tagged1])
    assert [(c.name, c.sql_kind, c.nullable) for c in shared.columns] == [("tags", "json", True)]


class Flags(Event):
    name: str
    on: bool
    ratio: float
    size: int | None = None


def test_plain_models_decode_sqlite_values() -> None:
    topic = TopicSchema.from_events("flags", [Flags])
    back = topic.decode("Flags", ("x", 0, 1, None))  # SQLite: bool as 0/1, REAL may be int
    assert back == Flags(name="x", on=False, ratio=1.0)
    assert back.on is False and type(back.ratio) is float
    assert back.model_fields_set == {"name", "on", "ratio", "size"}
    with pytest.raises(SchemaMismatchError, match="name"):
        topic.decode("Flags", (None, 1, 1.0, None))


def test_unsupported_and_reserved_names() -> None:
    bad = create_model("Bad", __base__=Event, pair=(tuple[int, str], ...))
    with pytest.raises(SpecError, match=r"Bad\.pair"):
        TopicSchema.from_events("bad", [bad])
    with pytest.raises(ReservedNameError):
        TopicSchema.from_arrow("raw", pa.schema([("_offset", pa.int64())]))

    class Aliased(BaseModel):
        x: int = Field(alias="_x")

    with pytest.raises(ReservedNameError):
        TopicSchema.from_model("aliased", Aliased)
    with pytest.raises(SpecError):
        TopicSchema.from_model("", Priced)
    with pytest.raises(SpecError, match="duplicate"):
        TopicSchema.from_arrow("dup", pa.schema([("a", pa.int64()), ("a", pa.string())]))
    union = pa.sparse_union([pa.field("i", pa.int64()), pa.field("s", pa.string())])
    for t in (union, pa.dictionary(pa.int32(), pa.string()), pa.struct([("u", union)])):
        with pytest.raises(SpecError):
            TopicSchema.from_arrow("weird", pa.schema([("v", t)]))


def test_unknown_event_type() -> None:
    topic = TopicSchema.from_events("prices", [Priced])
    with pytest.raises(UnknownEventTypeError, match="Vanished"):
        topic.decode("Vanished", (1,))
    with pytest.raises(UnknownEventTypeError, match="Vanished"):
        topic.encoder("Vanished")


# -- schema-only (CDC) topics ----------------------------------------------------------------

CDC = pa.schema(
    [
        pa.field("op", pa.string(), nullable=False),
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("after", pa.string()),
    ]
)
GOOD = {"op": ["c", "u"], "ts_ms": [1, 2], "key": ["k1", "k2"], "after": ['{"a":1}', None]}


def test_cdc_topic_round_trip() -> None:
    topic = TopicSchema.from_arrow("cdc", CDC)
    assert topic.event_types == {}
    assert [c.sql_kind for c in topic.columns] == ["text", "int", "text", "text"]
    table = pa.table(GOOD, schema=CDC)
    fields = topic.from_arrow_rows(table, with_meta=False)
    assert fields == [("c", 1, "k1", '{"a":1}'), ("u", 2, "k2", None)]
    assert topic.decode("ignored", fields[0]) == {
        "op": "c",
        "ts_ms": 1,
        "key": "k1",
        "after": '{"a":1}',
    }
    encode = topic.encoder("ignored")
    assert [encode(r) for r in table.to_pylist()] == fields
    meta = (9, 0, 0, None, None, "cdc", 1, "m", None, None, None, None, None, None, 0, None)
    batch = topic.to_arrow([(*meta, *f) for f in fields])
    assert batch.select(CDC.names).equals(pa.RecordBatch.from_pylist(table.to_pylist(), schema=CDC))
    assert [r[len(META_NAMES) :] for r in topic.from_arrow_rows(batch, with_meta=True)] == fields
    # safe widening casts are fine; a missing nullable column only when asked to fill it
    narrow = pa.table(
        {"op": pa.array(["d"], pa.large_string()), "ts_ms": pa.array([3], pa.int32()), "key": ["k"]}
    )
    assert topic.from_arrow_rows(narrow, with_meta=False, fill_missing=True) == [
        ("d", 3, "k", None)
    ]
    with pytest.raises(SchemaMismatchError, match="after"):
        topic.from_arrow_rows(narrow, with_meta=False)
    with pytest.raises(SchemaMismatchError, match="key"):
        encode({"op": "c", "ts_ms": 1})
    with pytest.raises(SchemaMismatchError, match="nope"):
        encode({**table.to_pylist()[0], "nope": 1})


@pytest.mark.parametrize(
    ("change", "column"),
    [
        (lambda t: t.set_column(1, "ts_ms", pa.array(["1", "2"])), "ts_ms"),
        (lambda t: t.drop_columns(["key"]), "key"),
        (lambda t: t.append_column("extra", pa.array([1, 2])), "extra"),
        (lambda t: t.set_column(0, pa.field("op", pa.string()), pa.array(["c", None])), "op"),
        (lambda t: t.set_column(1, "ts_ms", pa.array([1.5, 2.0])), "ts_ms"),
    ],
    ids=["text-to-int", "missing-not-null", "extra", "null-in-not-null", "float-to-int"],
)
def test_cdc_topic_rejects_mismatches(change: Callable[[pa.Table], pa.Table], column: str) -> None:
    topic = TopicSchema.from_arrow("cdc", CDC)
    with pytest.raises(SchemaMismatchError, match=column):
        topic.from_arrow_rows(change(pa.table(GOOD, schema=CDC)), with_meta=False)


def test_arrow_topic_with_nested_and_temporal_columns() -> None:
    schema = pa.schema(
        [
            pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("price", pa.decimal128(8, 2)),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.float64())),
            pa.field("info", pa.struct([("when", pa.date32()), ("raw", pa.binary())])),
            pa.field("kind", pa.string()),
        ]
    )
    topic = TopicSchema.from_arrow("mixed", schema)
    assert [c.sql_kind for c in topic.columns] == ["text", "text", "json", "json", "json", "text"]
    row = {
        "at": dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
        "price": decimal.Decimal("1.50"),
        "tags": ["a"],
        "attrs": {"x": 1.5},
        "info": {"when": dt.date(2020, 2, 2), "raw": b"\xff"},
        "kind": None,
    }
    values = topic.encoder("")(row)
    assert values[0] == "2020-01-01T00:00:00.000000+00:00"
    assert topic.decode("", values) == row
    meta = (1, 0, 0, None, None, "mixed", 1, "m", None, None, None, None, None, None, 0, None)
    batch = topic.to_arrow([(*meta, *values)])
    assert batch.to_pylist()[0]["info"] == row["info"]
    (back,) = topic.from_arrow_rows(batch, with_meta=True)
    assert topic.decode("", back[len(META_NAMES) :]) == row


def test_literal_and_union_columns() -> None:
    class Tagged(Event):
        mode: Literal["a", "b"]
        level: Literal[1, 2]
        either: int | str
        anything: Any

    topic = TopicSchema.from_events("tagged", [Tagged])
    assert [(c.sql_kind, str(c.arrow_type)) for c in topic.columns] == [
        ("text", "string"),
        ("int", "int64"),
        ("json", "string"),
        ("json", "string"),
    ]
    e = Tagged(mode="b", level=2, either="3", anything={"k": [1, None]})
    values = topic.encoder("Tagged")(e)
    assert values == ("b", 2, '"3"', '{"k":[1,null]}')
    assert topic.decode("Tagged", values) == e
