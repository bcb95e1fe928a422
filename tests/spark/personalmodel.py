"""Customers with personal fields (rv.Personal) and read models that copy them, for the
Spark tests (executors import the handlers from here)."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

from pydantic import BaseModel

import reventless as rv


class Registered(rv.Event):
    customer_id: str
    name: Annotated[str, rv.Personal(subject="customer_id")]
    born: Annotated[date | rv.Erased, rv.Personal(subject="customer_id")]
    city: str


class Renamed(rv.Event):
    customer_id: str
    name: Annotated[str, rv.Personal(subject="customer_id")]


class Customer(rv.Aggregate):
    events = Registered | Renamed
    name: str = ""

    @rv.applies(Registered)
    def _registered(self, e: Registered) -> None:
        self.name = e.name

    @rv.applies(Renamed)
    def _renamed(self, e: Renamed) -> None:
        self.name = e.name


class Card(BaseModel):
    id: str
    name: str = ""
    born: str = ""
    city: str = ""
    renames: int = 0


#: Keyed by the aggregate id (a Spark column): the handlers copy personal fields.
cards = rv.ReadModel("pd_cards", row=Card, key="id")


@cards.on(Registered)
def _card(ev: rv.Envelope[Registered]) -> rv.Upsert:
    e = ev.event
    return rv.Upsert(Card(id=ev.aggregate_id, name=e.name, born=str(e.born), city=e.city))


@cards.on(Renamed)
def _card_renamed(ev: rv.Envelope[Renamed], current: Card | None) -> rv.Upsert:
    card = current or Card(id=ev.aggregate_id)
    return rv.Upsert(card.model_copy(update={"name": ev.event.name, "renames": card.renames + 1}))


class Named(BaseModel):
    customer: str
    name: str


def _customer(ev: rv.Envelope[Any]) -> str:
    return str(ev.event.customer_id)


#: Keyed by a key function: the rebuild runs it on decoded (opened) events.
names = rv.ReadModel("pd_names", row=Named, key="customer")


@names.on(Registered, Renamed, key=_customer)
def _named(ev: rv.Envelope[Any]) -> rv.Upsert:
    return rv.Upsert(Named(customer=ev.event.customer_id, name=ev.event.name))


class Latest(BaseModel):
    id: str
    name: str = ""
    changes: int = 0


#: Column upserts over a personal field: rebuilt by the handlers, not compiled to SQL.
latest = rv.ReadModel("pd_latest", row=Latest, key="id")
rv.ColumnUpserts(latest).on(Registered, Renamed, latest={"name": "name"}, add={"changes": 1})

MODELS = [cards, names, latest]
PEOPLE = {
    "c-1": ("Ada Lovelace", date(1815, 12, 10), "London"),
    "c-2": ("Alan Turing", date(1912, 6, 23), "London"),
    "c-3": ("Grace Hopper", date(1906, 12, 9), "New York"),
}


async def register_all(log: rv.EventLog[Customer]) -> None:
    """Register PEOPLE, then rename c-1 and c-3 (versions 1 and 2)."""
    for cid, (name, born, city) in PEOPLE.items():
        event = Registered(customer_id=cid, name=name, born=born, city=city)
        await log.append(cid, [event], expected_version=0)
    for cid in ("c-1", "c-3"):
        renamed = Renamed(customer_id=cid, name=PEOPLE[cid][0].upper())
        await log.append(cid, [renamed], expected_version=1)
