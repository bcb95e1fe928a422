"""Decision models and deciders: declaration checks, folding, the pure decision step."""

from __future__ import annotations

from typing import Annotated, Any

import pytest

import reventless as rv
from reventless.testing import fold_model, given_dcb, tagged


class Opened(rv.Event):
    room: Annotated[str, rv.Tag("room")]


class Booked(rv.Event):
    room: Annotated[str, rv.Tag("room")]
    guest: Annotated[str, rv.Tag()]


class Foreign(rv.Event):
    x: int = 0


class Book(rv.Command):
    room: str
    guest: str


class Open(rv.Command):
    room: str


class RoomOpen(rv.DecisionModel[bool]):
    def __init__(self, room: str) -> None:
        super().__init__(False, tags=[f"room:{room}"])

    @rv.folds(Opened)
    def _opened(self, state: bool, e: Opened) -> bool:
        return True


class Guests(rv.DecisionModel[frozenset[str]]):
    def __init__(self, room: str) -> None:
        super().__init__(frozenset(), tags=[f"room:{room}"])

    @rv.folds(Booked)
    def _booked(self, state: frozenset[str], e: Booked) -> frozenset[str]:
        return state | {e.guest}


def hotel() -> rv.Decider:
    d = rv.Decider(events=Opened | Booked, name="hotel")

    @d.decides(Open, is_open=RoomOpen)
    def _open(cmd: Open, is_open: bool) -> Opened | None:
        return None if is_open else Opened(room=cmd.room)

    @d.decides(Book, is_open=RoomOpen, guests=lambda c: Guests(c.room))
    def _book(cmd: Book, is_open: bool, guests: frozenset[str]) -> list[rv.Event]:
        if not is_open:
            raise rv.Rejected("closed", cmd.room)
        if guests:
            raise rv.Rejected("taken", ",".join(sorted(guests)))
        return [Booked(room=cmd.room, guest=cmd.guest)]

    return d


# -- decision models ---------------------------------------------------------------------


def test_a_model_queries_its_folded_types_with_its_tags() -> None:
    m = Guests("r1")
    assert m.query == rv.Query((rv.QueryItem(types=("Booked",), tags=("room:r1",)),))
    assert m.wants("Booked", ("room:r1", "guest:g"))
    assert not m.wants("Booked", ("room:r2",))
    assert not m.wants("Opened", ("room:r1",))


def test_a_fold_of_something_that_is_no_event_fails_when_declared() -> None:
    with pytest.raises(rv.SpecError, match="@folds expects an Event subclass"):
        rv.folds(Book)  # type: ignore[arg-type]


def test_two_folds_of_one_event_fail_when_the_class_is_created() -> None:
    with pytest.raises(rv.SpecError, match="two @folds for event Opened"):

        class Twice(rv.DecisionModel[int]):
            @rv.folds(Opened)
            def _a(self, state: int, e: Opened) -> int:
                return state

            @rv.folds(Opened)
            def _b(self, state: int, e: Opened) -> int:
                return state


def test_a_subclass_may_replace_a_fold() -> None:
    class Counting(rv.DecisionModel[int]):
        def __init__(self) -> None:
            super().__init__(0)

        @rv.folds(Opened)
        def _opened(self, state: int, e: Opened) -> int:
            return state + 1

    class Doubling(Counting):
        @rv.folds(Opened)
        def _opened(self, state: int, e: Opened) -> int:
            return state + 2

    assert Doubling().fold([Opened(room="a"), Opened(room="b")]) == 4


def test_a_model_without_folds_or_with_bad_tags_fails_when_built() -> None:
    class Nothing(rv.DecisionModel[int]):
        pass

    with pytest.raises(rv.SpecError, match="folds no event"):
        Nothing(0)
    with pytest.raises(rv.SpecError, match="printable"):
        RoomOpen("bad\nroom")
    with pytest.raises(rv.SpecError, match="list of strings"):
        rv.DecisionModel.__init__(RoomOpen("a"), False, tags="room:a")


def test_folds_never_change_the_initial_state() -> None:
    class Mutating(rv.DecisionModel[list[str]]):
        def __init__(self) -> None:
            super().__init__([])

        @rv.folds(Opened)
        def _opened(self, state: list[str], e: Opened) -> list[str]:
            state.append(e.room)  # against the contract: the start state is a fresh copy
            return state

    m = Mutating()
    assert m.fold([Opened(room="a")]) == ["a"]
    assert m.fold([Opened(room="b")]) == ["b"]


def test_fold_model_applies_the_query_with_declared_and_extra_tags() -> None:
    past = [Opened(room="r2"), tagged(Foreign(), "room:r1"), Booked(room="r1", guest="g")]
    assert fold_model(RoomOpen("r1"), *past) is False
    assert fold_model(RoomOpen("r2"), *past) is True
    assert fold_model(Guests("r1"), *past) == {"g"}
    with pytest.raises(rv.SpecError, match="printable"):
        tagged(Opened(room="r"), "")


# -- deciders ----------------------------------------------------------------------------


def test_the_decision_query_is_the_union_of_the_models_queries() -> None:
    d = hotel()
    models = d.models(Book(room="r1", guest="g"))
    assert list(models) == ["is_open", "guests"]
    q = d.query(models.values())
    assert q == rv.Query.of(types=[Opened], tags=["room:r1"]) | rv.Query.of(
        types=[Booked], tags=["room:r1"]
    )
    assert d.query([RoomOpen("r1"), RoomOpen("r1")]) == rv.Query.of(
        types=[Opened], tags=["room:r1"]
    )


def test_decide_folds_each_model_on_its_own_events_and_runs_the_handler() -> None:
    d = hotel()
    given_dcb(d).when(Book(room="r1", guest="g")).then_rejected("closed")
    given_dcb(d, Opened(room="r1")).when(Book(room="r1", guest="g")).then(
        Booked(room="r1", guest="g")
    )
    given_dcb(d, Opened(room="r1"), Booked(room="r1", guest="h")).when(
        Book(room="r1", guest="g")
    ).then_rejected("taken")
    # a booking of another room matches neither model of r1
    given_dcb(d, Opened(room="r1"), Opened(room="r2"), Booked(room="r2", guest="h")).when(
        Book(room="r1", guest="g")
    ).then(Booked(room="r1", guest="g"))
    given_dcb(d, Opened(room="r1")).when(Open(room="r1")).then()


def test_given_events_must_be_events_of_the_log() -> None:
    with pytest.raises(rv.SpecError, match="Foreign is not an event of hotel"):
        given_dcb(hotel(), Foreign())


def test_the_outcome_assertions_fail_on_a_mismatch() -> None:
    d = hotel()
    with pytest.raises(AssertionError, match="was rejected"):
        given_dcb(d).when(Book(room="r1", guest="g")).then()
    with pytest.raises(AssertionError, match="rejected 'closed', expected 'taken'"):
        given_dcb(d).when(Book(room="r1", guest="g")).then_rejected("taken")
    with pytest.raises(AssertionError, match="expected a rejection"):
        given_dcb(d).when(Open(room="r1")).then_rejected()
    with pytest.raises(AssertionError, match="decided"):
        given_dcb(d).when(Open(room="r1")).then()


def test_a_command_without_a_handler() -> None:
    class Other(rv.Command):
        pass

    with pytest.raises(rv.UnhandledCommandError, match="no @decides for Other"):
        hotel().decide(Other(), [])


def test_declaration_mistakes_fail_when_declared() -> None:
    d = rv.Decider(events=Opened | Booked, name="hotel")
    with pytest.raises(rv.SpecError, match="expects a Command subclass"):
        d.decides(Opened)  # type: ignore[type-var]
    with pytest.raises(rv.SpecError, match="Foreign is not an event of hotel"):

        class ForeignModel(rv.DecisionModel[int]):
            def __init__(self, room: str) -> None:
                super().__init__(0)

            @rv.folds(Foreign)
            def _f(self, state: int, e: Foreign) -> int:
                return state

        d.decides(Open, n=ForeignModel)
    with pytest.raises(rv.SpecError, match="needs 'guest', which Open has no field for"):

        class ByGuest(rv.DecisionModel[int]):
            def __init__(self, guest: str) -> None:
                super().__init__(0, tags=[f"guest:{guest}"])

            @rv.folds(Booked)
            def _b(self, state: int, e: Booked) -> int:
                return state + 1

        d.decides(Open, n=ByGuest)
    with pytest.raises(rv.SpecError, match="no parameter for \\['guests'\\]"):

        @d.decides(Book, is_open=RoomOpen, guests=lambda c: Guests(c.room))
        def _missing(cmd: Book, is_open: bool) -> None:
            return None

    with pytest.raises(rv.SpecError, match="no model named \\['extra'\\]"):

        @d.decides(Book, is_open=RoomOpen)
        def _extra(cmd: Book, is_open: bool, extra: int) -> None:
            return None

    with pytest.raises(rv.SpecError, match="first parameter must take the command"):

        @d.decides(Book)
        def _kw(*, cmd: Book) -> None:
            return None

    with pytest.raises(rv.SpecError, match="expected a DecisionModel class, instance or function"):
        d.decides(Book, n=42)  # type: ignore[arg-type]

    @d.decides(Book, is_open=RoomOpen)
    def _ok(cmd: Book, **states: Any) -> None:
        return None

    with pytest.raises(rv.SpecError, match="two handlers for command Book"):
        d.decides(Book)
    assert list(d.handlers) == [Book]  # the failed declarations left nothing behind


def test_mistakes_of_a_model_function_fail_when_it_is_first_built() -> None:
    class ForeignCount(rv.DecisionModel[int]):
        def __init__(self) -> None:
            super().__init__(0)

        @rv.folds(Foreign)
        def _f(self, state: int, e: Foreign) -> int:
            return state

    d = rv.Decider(events=Opened | Booked, name="hotel")

    @d.decides(Open, n=lambda c: ForeignCount())
    def _open(cmd: Open, n: int) -> None:
        return None

    @d.decides(Book, n=lambda c: 3)  # type: ignore[arg-type,return-value]
    def _book(cmd: Book, n: int) -> None:
        return None

    with pytest.raises(rv.SpecError, match="Foreign is not an event of hotel"):
        d.decide(Open(room="r"), [])
    with pytest.raises(rv.SpecError, match="returned 3, not a DecisionModel"):
        d.decide(Book(room="r", guest="g"), [])


def test_a_handler_may_return_only_events_of_the_log() -> None:
    d = rv.Decider(events=Opened, name="hotel")

    @d.decides(Open)
    def _open(cmd: Open) -> Foreign:
        return Foreign()

    with pytest.raises(rv.SpecError, match="returned Foreign\\(x=0\\), which is not an event"):
        d.decide(Open(room="r"), [])


def test_a_model_instance_serves_every_command() -> None:
    d = rv.Decider(events=Opened | Booked, name="hotel")
    everything = Guests("r1")

    @d.decides(Book, guests=everything)
    def _book(cmd: Book, guests: frozenset[str]) -> Booked:
        return Booked(room="r1", guest=f"{cmd.guest}+{len(guests)}")

    assert d.models(Book(room="x", guest="g")) == {"guests": everything}
    given_dcb(d, Booked(room="r1", guest="a")).when(Book(room="x", guest="g")).then(
        Booked(room="r1", guest="g+1")
    )


def test_include_takes_in_the_handlers_of_a_decider_over_a_subset_of_the_events() -> None:
    whole = rv.Decider(events=Opened | Booked | Foreign, name="whole")
    whole.include(hotel())
    assert set(whole.handlers) == {Open, Book}
    given_dcb(whole, Opened(room="r1"), Foreign()).when(Book(room="r1", guest="g")).then(
        Booked(room="r1", guest="g")
    )
    with pytest.raises(rv.SpecError, match="two handlers for command Open"):
        whole.include(hotel())
    small = rv.Decider(events=Opened, name="small")
    with pytest.raises(rv.SpecError, match="Booked is not an event of small"):
        small.include(hotel())
