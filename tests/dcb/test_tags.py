"""Tags on event models, queries and their pure semantics, and the ``_tags`` column."""

from __future__ import annotations

import pickle
from typing import Annotated

import pyarrow as pa
import pytest

import reventless as rv
from reventless.codec import FIELDS_AT, META_NAMES, TopicSchema
from reventless.codec.codegen import plain_type
from reventless.decode import envelope_of
from reventless.errors import MetadataError, SpecError
from reventless.tags import check_tag, event_tags, matches, tag_fields
from tests.dcb.store_model import (
    EVENTS,
    Closed,
    CourseDefined,
    Graded,
    Level,
    NoteTaken,
    Opened,
    StudentSubscribed,
)

# -- tags of events -------------------------------------------------------------------------


def test_tag_fields_and_prefixes() -> None:
    assert tag_fields(CourseDefined) == (("course_id", "course"),)
    assert tag_fields(StudentSubscribed) == (("student_id", "student"), ("course_id", "course"))
    assert tag_fields(Graded) == (
        ("grade", "grade"),  # rv.Tag(): the field's name
        ("level", "level"),
        ("mentor", "mentor"),
        ("labels", "label"),
    )
    assert tag_fields(NoteTaken) == ()


def test_event_tags_from_values() -> None:
    assert event_tags(StudentSubscribed(student_id="s1", course_id="c1")) == (
        "student:s1",
        "course:c1",
    )
    # an int, an enum's value, None gives no tag, a list one tag per element (each once)
    assert event_tags(Graded(grade=3, level=Level.PRO, labels=["a", "b", "a"])) == (
        "grade:3",
        "level:pro",
        "label:a",
        "label:b",
    )
    assert event_tags(Graded(grade=1, level=Level.BASIC, mentor="m")) == (
        "grade:1",
        "level:basic",
        "mentor:m",
    )
    assert event_tags(NoteTaken(text="x")) == ()


def test_bad_tag_values_and_prefixes_are_refused() -> None:
    with pytest.raises(MetadataError):
        event_tags(CourseDefined(course_id="x" * 300, capacity=1))  # longer than 256
    with pytest.raises(MetadataError):
        event_tags(CourseDefined(course_id="a\nb", capacity=1))  # not printable
    for bad in ("", "a\tb", "x" * 257, 7):
        with pytest.raises(MetadataError):
            check_tag(bad)
    with pytest.raises(SpecError):
        rv.Tag("")


# -- queries --------------------------------------------------------------------------------


def test_query_items_normalise() -> None:
    item = rv.QueryItem(types=("B", "A", "B"), tags=("t:2", "t:1"))
    assert item == rv.QueryItem(types=("A", "B"), tags=("t:1", "t:2"))
    q = rv.Query.of(types=[StudentSubscribed, "CourseDefined"], tags=["course:c1"])
    assert q.items == (rv.QueryItem(("CourseDefined", "StudentSubscribed"), ("course:c1",)),)
    assert (q | q).items == q.items  # a union keeps each item once
    with pytest.raises(SpecError):
        rv.QueryItem(types="CourseDefined")  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        rv.Query.of(types=[rv.Event])
    with pytest.raises(MetadataError):
        rv.Query.of(tags=[""])


def test_query_semantics() -> None:
    course = rv.Query.of(types=[CourseDefined], tags=["course:c1"])
    assert matches(course, "CourseDefined", ["course:c1", "x:1"])
    assert not matches(course, "CourseDefined", ["course:c2"])
    assert not matches(course, "StudentSubscribed", ["course:c1"])
    both = rv.Query.of(tags=["course:c1", "student:s1"])  # ALL tags, ANY type
    assert matches(both, "StudentSubscribed", {"student:s1", "course:c1"})
    assert matches(both, "Anything", ("course:c1", "student:s1"))
    assert not matches(both, "StudentSubscribed", ["course:c1"])
    types = rv.Query.of(types=[CourseDefined, StudentSubscribed])  # ANY of the types
    assert matches(types, "StudentSubscribed", [])
    assert not matches(types, "NoteTaken", ["course:c1"])
    union = course | rv.Query.of(tags=["student:s9"])
    assert matches(union, "NoteTaken", ["student:s9"])
    assert matches(rv.Query.all(), "NoteTaken", [])
    assert not matches(rv.Query(()), "NoteTaken", [])  # no items: nothing


def test_append_condition_checks_its_fields() -> None:
    cond = rv.AppendCondition(rv.Query.all())
    assert cond.after == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(SpecError):
            rv.AppendCondition(rv.Query.all(), after=bad)  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        rv.AppendCondition("all")  # type: ignore[arg-type]


def test_append_condition_error_is_a_concurrency_error_and_pickles() -> None:
    q = rv.Query.of(tags=["course:c1"])
    err = rv.AppendConditionError("courses", q, 3, 7)
    assert isinstance(err, rv.ConcurrencyError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.topic, again.query, again.after, again.position) == ("courses", q, 3, 7)
    assert "position 7" in str(again)


# -- the _tags column -----------------------------------------------------------------------


def test_tags_column_only_where_tags_are() -> None:
    tagged = TopicSchema.from_events("t", [Opened, Closed])
    assert tagged.columns[-1].name == "_tags"
    assert tagged.arrow_schema.field("_tags").type == pa.list_(
        pa.field("element", pa.string(), False)
    )
    assert not tagged.arrow_schema.field("_tags").nullable
    assert tagged.tags_at == FIELDS_AT + len(tagged.columns) - 1
    plain = TopicSchema.from_events("t", [Closed])
    assert plain.tags_at is None and "_tags" not in plain.arrow_schema.names
    forced = TopicSchema.from_events("t", [Closed], tags=True)  # a DCB log
    assert forced.tags_at is not None
    assert forced.encoder("Closed")(Closed(reason="r")) == ("r", "[]")


def test_encoders_fill_tags_and_decoders_ignore_them() -> None:
    schema = TopicSchema.from_events("courses", list(EVENTS), tags=True)
    e = StudentSubscribed(student_id="s1", course_id="c1")
    values = schema.encoder("StudentSubscribed")(e)
    assert values[-1] == '["student:s1","course:c1"]'
    assert schema.decode("StudentSubscribed", values) == e
    row = (1, 0, 5, None, None, "StudentSubscribed", 1, "m", *[None] * 6, 0, None, *values)
    env = envelope_of(schema, "courses", row)
    assert env.event == e and env.tags == ("student:s1", "course:c1")
    plain = TopicSchema.from_events("c", [Closed])
    row = (1, 0, 5, "a", 1, "Closed", 1, "m", *[None] * 6, 0, None, "why")
    assert envelope_of(plain, "c", row).tags == ()


def test_tags_round_trip_through_arrow_and_a_stored_schema() -> None:
    schema = TopicSchema.from_events("courses", list(EVENTS), tags=True)
    values = schema.encoder("StudentSubscribed")(StudentSubscribed(student_id="s", course_id="c"))
    row = (1, 0, 5, None, None, "StudentSubscribed", 1, "m", *[None] * 6, 0, None, *values)
    batch = schema.to_arrow([row])
    assert batch.column("_tags").to_pylist() == [["student:s", "course:c"]]
    assert schema.from_arrow_rows(batch, with_meta=True) == [row]
    # what catalogs and Spark rebuild from the stored Arrow schema keeps the column
    stored = pa.schema([f for f in schema.arrow_schema if f.name not in META_NAMES])
    again = TopicSchema.from_arrow("courses", stored)
    assert again.tags_at == schema.tags_at and again.fingerprint == schema.fingerprint
    assert again.from_arrow_rows(batch, with_meta=True) == [row]
    with pytest.raises(SpecError):  # the tags column goes last
        TopicSchema.from_arrow("x", pa.schema([stored.field("_tags"), pa.field("a", pa.int64())]))


def test_tag_fields_keep_the_fast_decoder() -> None:
    class Tagged(rv.Event):
        who: Annotated[str, rv.Tag("who")]
        n: int

    # a Tag marker constrains nothing: the field still decodes on the unvalidated fast path
    assert plain_type(Tagged.model_fields["who"]) == (str, False)
    schema = TopicSchema.from_events("t", [Tagged])
    values = schema.encoder("Tagged")(Tagged(who="a", n=1))
    assert schema.decode("Tagged", values) == Tagged(who="a", n=1)
