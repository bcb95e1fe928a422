"""Tests of the customer example: the spec with given/when/then, the app end to end."""

from __future__ import annotations

import reventless as rv
from examples.customer.model import (
    AddressChanged,
    ChangeAddress,
    Created,
    Customer,
    CustomerRow,
    Delete,
    Deleted,
    NameChanged,
    Register,
    Rename,
    directory,
)
from reventless.testing import given, given_events

ADA = Created(name="Ada", address="1 Main St")


def test_register_once() -> None:
    given(Customer).when(Register(name="Ada", address="1 Main St")).then(ADA)
    given(Customer, ADA).when(Register(name="Ada", address="x")).then_rejected("already_registered")


def test_changes_need_an_active_customer() -> None:
    given(Customer).when(ChangeAddress(address="2 Side St")).then_rejected("not_registered")
    given(Customer, ADA, Deleted()).when(Rename(name="Bea")).then_rejected("deleted")


def test_changes_emit_only_real_changes() -> None:
    state = (
        given(Customer, ADA)
        .when(ChangeAddress(address="2 Side St"))
        .then(AddressChanged(address="2 Side St"))
    )
    assert state.address == "2 Side St"
    given(Customer, ADA).when(ChangeAddress(address="1 Main St")).then()
    given(Customer, ADA).when(Rename(name="Bea")).then(NameChanged(name="Bea"))
    given(Customer, ADA).when(Delete(reason="gdpr")).then(Deleted(reason="gdpr"))


def test_directory_rows() -> None:
    given_events(
        directory,
        ("c-1", ADA),
        ("c-2", Created(name="Bob", address="9 Elm St")),
        ("c-1", AddressChanged(address="2 Side St")),
        ("c-2", Deleted()),
    ).then_rows(CustomerRow(id="c-1", name="Ada", address="2 Side St"))


async def test_customer_app_end_to_end(store_url: str) -> None:
    app = rv.App(store=store_url)
    customers = app.event_log(Customer)
    view = app.collect(directory)
    async with app:
        await customers.execute("c-1", Register(name="Ada", address="1 Main St"))
        await customers.execute("c-2", Register(name="Bob", address="9 Elm St"))
        await customers.execute("c-1", Rename(name="Ada L."))
        await customers.execute("c-2", Delete())
        await app.settle()
        assert await view.all() == [CustomerRow(id="c-1", name="Ada L.", address="1 Main St")]
        assert await view.find(name="Ada L.") == await view.all()
        assert (await customers.get("c-2")).deleted
