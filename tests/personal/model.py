"""A customer registry with personal data, shared by the personal-data tests."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from pydantic import BaseModel

import reventless as rv

#: Plaintext the tests look for in files, dumps and broker messages.
ADA = "Ada Lovelace"
ADA_MAIL = "ada@analytical.example"
ALAN = "Alan Turing"


class Registered(rv.Event):
    customer_id: str
    name: Annotated[str, rv.Personal(subject="customer_id")]
    email: Annotated[str | None, rv.Personal(subject="customer_id")] = None
    born: Annotated[date | rv.Erased | None, rv.Personal(subject="customer_id")] = None
    city: str


class Moved(rv.Event):
    address: Annotated[str, rv.Personal()]  # the aggregate id is the subject


class Register(rv.Command):
    name: str
    email: str | None = None
    born: date | None = None
    city: str


class Move(rv.Command):
    address: str


class Customer(rv.Aggregate):
    events = Registered | Moved
    name: str = ""
    address: str = ""
    born: date | rv.Erased | None = None

    @rv.handles(Register)
    def register(self, cmd: Register) -> Registered:
        if self.version:
            raise rv.Rejected("already_registered", f"{self.id} exists")
        return Registered(
            customer_id=self.id, name=cmd.name, email=cmd.email, born=cmd.born, city=cmd.city
        )

    @rv.handles(Move)
    def move(self, cmd: Move) -> Moved:
        return Moved(address=cmd.address)

    @rv.applies(Registered)
    def _registered(self, e: Registered) -> None:
        self.name, self.born = e.name, e.born

    @rv.applies(Moved)
    def _moved(self, e: Moved) -> None:
        self.address = e.address


class DirectoryRow(BaseModel):
    id: str
    name: str
    city: str
    address: str = ""


directory = rv.ReadModel("pd_directory", row=DirectoryRow, key="id")


@directory.on(Registered)
def _registered(ev: rv.Envelope[Registered]) -> rv.Upsert[DirectoryRow]:
    return rv.Upsert(DirectoryRow(id=ev.event.customer_id, name=ev.event.name, city=ev.event.city))


@directory.on(Moved)
def _moved(ev: rv.Envelope[Moved], current: DirectoryRow | None) -> rv.Upsert[DirectoryRow] | None:
    if current is None:
        return None
    return rv.Upsert(current.model_copy(update={"address": ev.event.address}))


@directory.on_forget
def _forget(subject: str, current: DirectoryRow | None) -> rv.Upsert[DirectoryRow] | None:
    if current is None:
        return None
    return rv.Upsert(current.model_copy(update={"name": rv.ERASED, "address": rv.ERASED}))


def app_of(
    url: str, broker: str = "memory://", **log: object
) -> tuple[rv.App, rv.EventLog[Customer]]:
    app = rv.App(url, broker, service="pd-test", options=rv.AppOptions(log=rv.LogOptions(**log)))  # type: ignore[arg-type]
    customers = app.event_log(Customer)
    app.collect(directory)
    return app, customers


async def register_two(customers: rv.EventLog[Customer]) -> None:
    await customers.execute(
        "c-1", Register(name=ADA, email=ADA_MAIL, born=date(1815, 12, 10), city="London")
    )
    await customers.execute("c-1", Move(address="12 St James's Square"))
    await customers.execute("c-2", Register(name=ALAN, born=date(1912, 6, 23), city="London"))


def cli_app(store: str) -> rv.App:
    """``--app tests.personal.model:cli_app --store URL`` (the CLI's factory)."""
    return app_of(store)[0]
