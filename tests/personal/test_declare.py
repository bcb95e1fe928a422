"""Declaring personal data: what the codec accepts, and how sealed columns look."""

from __future__ import annotations

from datetime import date
from typing import Annotated

import pyarrow as pa
import pytest

import reventless as rv
from reventless.codec import META_FIELDS, PERSONAL_KEY, TopicSchema
from reventless.personal import admits_erased, personal_fields
from tests.personal.model import Customer, Registered


def test_personal_columns_are_sealed_text_with_their_subject() -> None:
    schema = TopicSchema.from_events("customers", list(Customer.event_classes))
    fields = {f.name: f for f in schema.arrow_schema}
    for name in ("name", "email", "born", "address"):
        assert fields[name].type == pa.string() and fields[name].nullable
    assert fields["name"].metadata == {PERSONAL_KEY.encode(): b"customer_id"}
    assert fields["address"].metadata == {PERSONAL_KEY.encode(): b""}
    assert fields["city"].metadata is None
    # a stored schema read back (catalogs, Spark) knows its personal columns
    again = TopicSchema.from_arrow(
        "customers", pa.schema(list(schema.arrow_schema)[len(META_FIELDS) :])
    )
    assert again.personal == schema.personal and len(schema.personal) == 4
    assert personal_fields(Registered) == (
        ("name", "customer_id"),
        ("email", "customer_id"),
        ("born", "customer_id"),
    )


def test_a_field_that_cannot_hold_the_placeholder_is_refused() -> None:
    class Bad(rv.Event):
        customer_id: str
        born: Annotated[date, rv.Personal(subject="customer_id")]

    with pytest.raises(rv.SpecError, match=r"date \| rv.Erased"):
        TopicSchema.from_events("bad", [Bad])
    assert admits_erased(str) and admits_erased(date | rv.Erased)
    assert admits_erased(str | None) and not admits_erased(int | None)


def test_the_subject_must_be_another_plain_field() -> None:
    class NoSubject(rv.Event):
        name: Annotated[str, rv.Personal(subject="customer_id")]

    class PersonalSubject(rv.Event):
        customer_id: Annotated[str, rv.Personal()]
        name: Annotated[str, rv.Personal(subject="customer_id")]

    with pytest.raises(rv.SpecError, match="names no field"):
        TopicSchema.from_events("a", [NoSubject])
    with pytest.raises(rv.SpecError, match="cannot be personal itself"):
        TopicSchema.from_events("b", [PersonalSubject])
    with pytest.raises(rv.SpecError, match="must name a field"):
        rv.Personal(subject="not a field")


def test_a_shared_column_must_agree_on_being_personal() -> None:
    class A(rv.Event):
        name: Annotated[str, rv.Personal()]

    class B(rv.Event):
        name: str

    with pytest.raises(rv.SpecError, match="personal data of the aggregate"):
        TopicSchema.from_events("mixed", [A, B])


def test_encoders_never_hand_plaintext_to_sql() -> None:
    """An encoded personal value is a ``Plaintext`` wrapper (only the keyring turns it
    into stored text), and a value no keyring opened decodes as ERASED."""
    schema = TopicSchema.from_events("customers", list(Customer.event_classes))
    e = Registered(customer_id="c-1", name="Ada", born=date(1815, 12, 10), city="London")
    values = schema.encoder("Registered")(e)
    by_name = dict(zip([c.name for c in schema.columns], values, strict=True))
    assert type(by_name["name"]).__name__ == "Plaintext" and by_name["city"] == "London"
    assert schema.decode("Registered", values) == e  # opened values decode as themselves
    sealed = [
        "rv1:x:y" if type(v).__name__ == "Plaintext" else v for v in values
    ]  # sealed text nobody opened
    got = schema.decode("Registered", sealed)
    assert got.name is rv.ERASED and got.born is rv.ERASED and got.city == "London"
    assert got.email is None  # a None stays None: nothing was sealed
    assert isinstance(got.name, str) and got.name == "[erased]"
    assert got.model_dump()["born"] == "[erased]"


def test_a_predicate_cannot_filter_on_a_personal_field() -> None:
    from reventless.errors import PredicateError
    from reventless.predicate import Predicate

    schema = TopicSchema.from_events("customers", list(Customer.event_classes))
    with pytest.raises(PredicateError, match="personal data, sealed at rest"):
        Predicate.parse("name = 'Ada'", schema)
    assert Predicate.parse("city = 'London'", schema) is not None
