"""A customer registry: the smallest complete reventless application."""

from __future__ import annotations

from pydantic import BaseModel

import reventless as rv


class Created(rv.Event):
    name: str
    address: str


class AddressChanged(rv.Event):
    address: str


class NameChanged(rv.Event):
    name: str


class Deleted(rv.Event):
    reason: str = ""


class Register(rv.Command):
    name: str
    address: str


class ChangeAddress(rv.Command):
    address: str


class Rename(rv.Command):
    name: str


class Delete(rv.Command):
    reason: str = ""


class Customer(rv.Aggregate):
    """A registered customer; deleted customers accept no more changes."""

    events = Created | AddressChanged | NameChanged | Deleted
    name: str = ""
    address: str = ""
    deleted: bool = False

    def _require_active(self) -> None:
        if not self.version:
            raise rv.Rejected("not_registered", f"customer {self.id} does not exist")
        if self.deleted:
            raise rv.Rejected("deleted", f"customer {self.id} was deleted")

    @rv.handles(Register)
    def register(self, cmd: Register) -> Created:
        if self.version:
            raise rv.Rejected("already_registered", f"customer {self.id} exists")
        return Created(name=cmd.name, address=cmd.address)

    @rv.handles(ChangeAddress)
    def change_address(self, cmd: ChangeAddress) -> AddressChanged | None:
        self._require_active()
        if cmd.address == self.address:
            return None  # nothing changes: no event
        return AddressChanged(address=cmd.address)

    @rv.handles(Rename)
    def rename(self, cmd: Rename) -> NameChanged | None:
        self._require_active()
        return None if cmd.name == self.name else NameChanged(name=cmd.name)

    @rv.handles(Delete)
    def delete(self, cmd: Delete) -> Deleted:
        self._require_active()
        return Deleted(reason=cmd.reason)

    @rv.applies(Created)
    def _created(self, e: Created) -> None:
        self.name, self.address = e.name, e.address

    @rv.applies(AddressChanged)
    def _moved(self, e: AddressChanged) -> None:
        self.address = e.address

    @rv.applies(NameChanged)
    def _renamed(self, e: NameChanged) -> None:
        self.name = e.name

    @rv.applies(Deleted)
    def _deleted(self, e: Deleted) -> None:
        self.deleted = True


class CustomerRow(BaseModel):
    id: str
    name: str
    address: str


directory: rv.ReadModel[CustomerRow] = rv.ReadModel("customer_directory", row=CustomerRow, key="id")


@directory.on(Created)
def _created_row(ev: rv.Envelope[Created]) -> rv.Upsert[CustomerRow]:
    assert ev.aggregate_id is not None
    return rv.Upsert(CustomerRow(id=ev.aggregate_id, name=ev.event.name, address=ev.event.address))


@directory.on(AddressChanged, NameChanged)
def _changed_row(
    ev: rv.Envelope[AddressChanged | NameChanged], current: CustomerRow | None
) -> rv.Upsert[CustomerRow] | None:
    if current is None:
        return None
    if isinstance(ev.event, AddressChanged):
        return rv.Upsert(current.model_copy(update={"address": ev.event.address}))
    return rv.Upsert(current.model_copy(update={"name": ev.event.name}))


@directory.on(Deleted)
def _deleted_row(ev: rv.Envelope[Deleted]) -> rv.Delete:
    return rv.Delete(ev.aggregate_id)
