"""Event classes that change between versions (for rebuilds over old events)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import reventless as rv


class CreatedV1(rv.Event):
    event_type = "Created"
    name: str


class Ghost(rv.Event):
    """A type a later version of the code no longer has."""


class PersonV1(rv.Aggregate):
    topic_name = "Person"
    events = CreatedV1 | Ghost

    @rv.applies(CreatedV1)
    def _c(self, e: CreatedV1) -> None:
        pass

    @rv.applies(Ghost)
    def _g(self, e: Ghost) -> None:
        pass


class Created(rv.Event):
    """Version 2 without an upcaster: version-1 rows no longer decode."""

    schema_version = 2
    name: str
    nick: str


class PersonV2(rv.Aggregate):
    topic_name = "Person"
    events = Created

    @rv.applies(Created)
    def _c(self, e: Created) -> None:
        pass


class CreatedUp(rv.Event):
    """Version 2 with an upcaster."""

    event_type = "Created"
    schema_version = 2
    name: str
    nick: str

    @rv.upcasts(1)
    def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "nick": data["name"].lower()}


class PersonV2Up(rv.Aggregate):
    topic_name = "Person"
    events = CreatedUp

    @rv.applies(CreatedUp)
    def _c(self, e: CreatedUp) -> None:
        pass


class PersonRow(BaseModel):
    id: str
    name: str
    nick: str


people: rv.ReadModel[PersonRow] = rv.ReadModel("people", row=PersonRow, key="id")


@people.on(Created)
def _person(ev: rv.Envelope[Created]) -> rv.Upsert[PersonRow]:
    assert ev.aggregate_id is not None
    return rv.Upsert(PersonRow(id=ev.aggregate_id, name=ev.event.name, nick=ev.event.nick))


people_up: rv.ReadModel[PersonRow] = rv.ReadModel("people_up", row=PersonRow, key="id")


@people_up.on(CreatedUp)
def _person_up(ev: rv.Envelope[CreatedUp]) -> rv.Upsert[PersonRow]:
    assert ev.aggregate_id is not None
    return rv.Upsert(PersonRow(id=ev.aggregate_id, name=ev.event.name, nick=ev.event.nick))


wrong_key: rv.ReadModel[PersonRow] = rv.ReadModel("wrong_key", row=PersonRow, key="id")


@wrong_key.on(CreatedUp)
def _wrong(ev: rv.Envelope[CreatedUp]) -> rv.Upsert[PersonRow]:
    return rv.Upsert(PersonRow(id=ev.event.name, name=ev.event.name, nick=ev.event.nick))
