"""``fresh_state``: a new aggregate's state built without validation is exactly the state
``spec(id=...)`` validates, and every spec whose validation could differ (validators,
mutable defaults, private attributes, its own ``__init__``, aliases) is validated."""

from __future__ import annotations

from enum import Enum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field, PrivateAttr, ValidationError, field_validator

import reventless as rv
from reventless.codec.codegen import fresh_state


class Bumped(rv.Event):
    by: int = 1


class Plain(rv.Aggregate):
    events = Bumped
    value: int = 0
    ratio: float = 0  # an int default on a float field: kept as given, not validated
    name: str = "none"
    note: str | None = None
    flag: bool = False
    raw: bytes = b""

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        self.value += e.by


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert list(got.__dict__.items()) == list(want.__dict__.items())  # order too
    assert [type(v) for v in got.__dict__.values()] == [type(v) for v in want.__dict__.values()]
    assert got.model_fields_set == want.model_fields_set
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert got == want
    assert got.model_dump(exclude_unset=True) == want.model_dump(exclude_unset=True)
    assert got.model_dump_json() == want.model_dump_json()


@given(st.text(max_size=40))
def test_a_plain_spec_is_built_as_validation_builds_it(aggregate_id: str) -> None:
    fresh = fresh_state(Plain)
    assert fresh.__name__ == "fresh"  # the unvalidated build
    _same(fresh(aggregate_id), Plain(id=aggregate_id))


def test_fresh_states_are_independent_and_behave() -> None:
    fresh = fresh_state(Plain)
    a, b = fresh("a"), fresh("b")
    assert a.__dict__ is not b.__dict__ and a.model_fields_set is not b.model_fields_set
    a.apply(Bumped(by=3))
    assert (a.value, a.version, b.value, b.version) == (3, 1, 0, 0)
    assert Plain.model_validate_json(a.model_dump_json()) == a
    assert a.model_copy(update={"name": "x"}).name == "x" and a.name == "none"
    with pytest.raises(ValidationError):  # not a str: validation's own error
        fresh(7)  # type: ignore[arg-type]


class Listed(rv.Aggregate):
    events = Bumped
    seen: list[int] = []  # pydantic copies a mutable default per instance

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        self.seen.append(e.by)


class Shouted(rv.Aggregate):
    events = Bumped

    @field_validator("id")
    @classmethod
    def _upper(cls, v: str) -> str:
        return v.upper()

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        pass


class Private(rv.Aggregate):
    events = Bumped
    _hits: int = PrivateAttr(default=5)

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        pass


class Counted(rv.Aggregate):
    events = Bumped
    made: int = 0

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        self.made = 1

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        pass


class Color(Enum):
    RED = "red"


class Colored(rv.Aggregate):
    events = Bumped
    color: Color = Color.RED
    size: int = Field(default=0, ge=0)
    tags: tuple[str, ...] = ()
    made_by: list[str] = Field(default_factory=list)

    @rv.applies(Bumped)
    def _b(self, e: Bumped) -> None:
        pass


@pytest.mark.parametrize("spec", [Listed, Shouted, Private, Counted, Colored])
def test_specs_that_validation_could_change_are_validated(spec: type[rv.Aggregate]) -> None:
    fresh = fresh_state(spec)
    assert fresh.__name__ == "validated"
    _same(fresh("x"), spec(id="x"))
    one, two = fresh("one"), fresh("two")
    for name, value in one.__dict__.items():  # no mutable value shared between states
        if isinstance(value, list | dict | set):
            assert value is not two.__dict__[name]
    if spec is Shouted:
        assert one.id == "ONE"
    if spec is Private:
        assert one._hits == 5
    if spec is Counted:
        assert one.made == 1


async def test_a_new_aggregate_in_the_log_starts_from_the_fresh_state(tmp_path: Any) -> None:
    class Open(rv.Command):
        pass

    class Door(rv.Aggregate):
        events = Bumped
        opened: int = 0

        @rv.handles(Open)
        def open(self, cmd: Open) -> Bumped:
            return Bumped(by=self.opened + 1)

        @rv.applies(Bumped)
        def _b(self, e: Bumped) -> None:
            self.opened += e.by

    app = rv.App(store=f"sqlite:///{tmp_path / 'd.db'}")
    log = app.event_log(Door)
    async with app:
        got = await log.execute_many([(f"d-{i}", Open()) for i in range(5)])
        assert [r.version for r in got] == [1] * 5
        await log.execute("solo", Open())
        for i in range(5):
            state = await log.load(f"d-{i}")
            assert state.__dict__ == {"id": f"d-{i}", "version": 1, "opened": 1}
            assert state == Door(id=f"d-{i}", version=1, opened=1)
