"""Definition-time checks and the decide/evolve surface."""

from __future__ import annotations

import copy
import pickle

import pytest

import reventless as rv
from reventless.testing import given
from tests.model import Counter, Increment, Incremented, Noop, Reset, ResetCounter


class Opened(rv.Event):
    owner: str


class Closed(rv.Event):
    pass


class Open(rv.Command):
    owner: str


def test_missing_applier_fails_at_class_definition() -> None:
    with pytest.raises(rv.SpecError, match="Closed is in the union but has no @applies"):

        class Account(rv.Aggregate):
            events = Opened | Closed

            @rv.applies(Opened)
            def _o(self, e: Opened) -> None:
                pass


def test_applier_for_event_outside_union_fails() -> None:
    with pytest.raises(rv.SpecError, match="not in `events`"):

        class Account(rv.Aggregate):
            events = Opened

            @rv.applies(Opened)
            def _o(self, e: Opened) -> None:
                pass

            @rv.applies(Closed)
            def _c(self, e: Closed) -> None:
                pass


def test_two_event_types_with_the_same_name_fail() -> None:
    class Other(rv.Event):
        event_type = "Opened"

    with pytest.raises(rv.SpecError, match="share the name 'Opened'"):

        class Account(rv.Aggregate):
            events = Opened | Other

            @rv.applies(Opened)
            def _o(self, e: Opened) -> None:
                pass

            @rv.applies(Other)
            def _x(self, e: Other) -> None:
                pass


@pytest.mark.parametrize("name", ["_offset", "_row_idx", "_produced_at", "_anything"])
def test_reserved_field_names_fail_at_class_definition(name: str) -> None:
    with pytest.raises(rv.ReservedNameError, match="reserved"):
        type("Bad", (rv.Event,), {"__annotations__": {name: int}, "__module__": __name__})


def test_reserved_alias_fails() -> None:
    from pydantic import Field

    with pytest.raises(rv.ReservedNameError):

        class Bad(rv.Event):
            offset: int = Field(alias="_offset")


def test_missing_events_declaration_fails() -> None:
    with pytest.raises(rv.SpecError, match="events ="):

        class Nothing(rv.Aggregate):
            pass


def test_handler_returning_foreign_event_is_a_spec_error() -> None:
    class Account(rv.Aggregate):
        events = Opened

        @rv.handles(Open)
        def open(self, cmd: Open) -> Closed:
            return Closed()

        @rv.applies(Opened)
        def _o(self, e: Opened) -> None:
            pass

    with pytest.raises(rv.SpecError, match="not in the aggregate's `events` union"):
        Account(id="a").decide(Open(owner="x"))


def test_unhandled_command() -> None:
    with pytest.raises(rv.UnhandledCommandError):
        Counter(id="c").decide(Open(owner="x"))


def test_zero_one_many_events_and_typed_rejection() -> None:
    given(Counter).when(Noop()).then()
    state = given(Counter).when(Increment(by=2)).then(Incremented(by=2))
    assert state.value == 2 and state.version == 1
    state = given(Counter, Incremented(by=5)).when(ResetCounter()).then(Reset(), Incremented(by=0))
    assert state.value == 0 and state.version == 3
    rej = given(Counter).when(Increment(by=0)).then_rejected("bad_amount")
    assert rej.detail == "cannot increment by 0" and rej.data == {"by": 0}


def test_events_and_commands_are_immutable_and_strict() -> None:
    e = Incremented(by=1)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        e.by = 2  # type: ignore[misc]
    with pytest.raises(Exception):  # noqa: B017 - extra fields are forbidden
        Incremented(by=1, nope=2)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "kwargs",
    [{"ip": "not-an-ip"}, {"user": ""}, {"user": "x" * 600}, {"tenant": 5}, {"service": "a\nb"}],
)
def test_malformed_metadata_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(rv.MetadataError):
        rv.Metadata(**kwargs)  # type: ignore[arg-type]


def test_metadata_is_an_immutable_record_of_six_fields() -> None:
    meta = rv.Metadata(user="ada", ip="10.0.0.1")
    assert (meta.correlation_id, meta.user, meta.ip, meta.tenant) == (None, "ada", "10.0.0.1", None)
    assert meta == rv.Metadata(user="ada", ip="10.0.0.1") and hash(meta) == hash(
        rv.Metadata(user="ada", ip="10.0.0.1")
    )
    assert repr(meta) == (
        "Metadata(correlation_id=None, causation_id=None, user='ada', service=None, "
        "ip='10.0.0.1', tenant=None)"
    )
    with pytest.raises(AttributeError):
        meta.user = "bob"  # type: ignore[misc]
    assert rv.Metadata("c-1", "c-0") == rv.Metadata(correlation_id="c-1", causation_id="c-0")
    trusted = rv.Metadata.trusted("c-1", None, "ada", "svc", None, "t")
    assert type(trusted) is rv.Metadata
    assert trusted == rv.Metadata(correlation_id="c-1", user="ada", service="svc", tenant="t")
    # what a store read back is copied and unpickled as it is, not validated again
    old = rv.Metadata.trusted(None, None, None, None, "not an ip (an older rule)", None)
    for copied in (pickle.loads(pickle.dumps(old)), copy.deepcopy(old), copy.copy(old)):
        assert type(copied) is rv.Metadata and copied == old
    assert pickle.loads(pickle.dumps(meta)) == meta


def test_uuid7_is_time_ordered() -> None:
    ids = [rv.uuid7() for _ in range(1000)]
    assert all(i.version == 7 for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == 1000


def test_rejected_pickles_with_code_and_detail() -> None:
    import pickle

    r = pickle.loads(pickle.dumps(rv.Rejected("code", "detail", n=1)))
    assert (r.code, r.detail, r.data) == ("code", "detail", {"n": 1})
