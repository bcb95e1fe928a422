"""Schema evolution: events stored by an older class version are upcast on read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import reventless as rv


class CreatedV1(rv.Event):
    event_type = "Created"
    name: str
    address: str


class Person1(rv.Aggregate):
    topic_name = "Person"
    events = CreatedV1
    name: str = ""

    @rv.applies(CreatedV1)
    def _c(self, e: CreatedV1) -> None:
        self.name = e.name


class Created(rv.Event):
    """Version 2: ``address`` became ``street`` plus ``city``."""

    schema_version = 2
    name: str
    street: str
    city: str = "unknown"

    @rv.upcasts(1, retired={"address": str})
    def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
        street, _, city = data.pop("address").partition(", ")
        return {**data, "street": street, "city": city or "unknown"}


class Person2(rv.Aggregate):
    topic_name = "Person"
    events = Created
    name: str = ""
    street: str = ""
    city: str = ""

    @rv.applies(Created)
    def _c(self, e: Created) -> None:
        self.name, self.street, self.city = e.name, e.street, e.city


async def test_old_events_are_upcast_on_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'up.db'}"
    old = rv.App(store=url)
    log1 = old.event_log(Person1)
    async with old:
        await log1.append(
            "p-1", [CreatedV1(name="Ada", address="1 Main St, Springfield")], expected_version=0
        )
        await log1.append("p-2", [CreatedV1(name="Bob", address="9 Elm St")], expected_version=0)
    new = rv.App(store=url)
    log2 = new.event_log(Person2)
    async with new:
        ada = await log2.load("p-1")
        assert (ada.street, ada.city, ada.version) == ("1 Main St", "Springfield", 1)
        await log2.append(
            "p-3", [Created(name="Cy", street="3 Oak", city="Paris")], expected_version=0
        )
        events = [e.event for e in await log2.read()]
        assert events == [
            Created(name="Ada", street="1 Main St", city="Springfield"),
            Created(name="Bob", street="9 Elm St", city="unknown"),
            Created(name="Cy", street="3 Oak", city="Paris"),
        ]
        versions = await new.store.db.read(
            lambda c: list(c.exec_driver_sql("SELECT _schema_version, address FROM ev_person"))
        )
        assert versions == [(1, "1 Main St, Springfield"), (1, "9 Elm St"), (2, None)]
        await log2.export_parquet(tmp_path / "p.parquet")  # the retired column stays typed
        assert "address" in pq.read_schema(tmp_path / "p.parquet").names


async def test_dropping_a_column_without_retiring_it_fails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'up.db'}"
    old = rv.App(store=url)
    old.event_log(Person1)
    async with old:
        pass

    class Bare(rv.Event):
        event_type = "Created"
        schema_version = 2
        name: str

    class Person3(rv.Aggregate):
        topic_name = "Person"
        events = Bare

        @rv.applies(Bare)
        def _c(self, e: Bare) -> None:
            pass

    app = rv.App(store=url)
    app.event_log(Person3)
    with pytest.raises(rv.SchemaMismatchError, match="retired"):
        await app.start()


async def test_missing_upcaster_and_future_versions_fail_loudly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'up.db'}"

    class Created3(rv.Event):
        event_type = "Created"
        schema_version = 3
        name: str
        street: str
        city: str = "unknown"

        @rv.upcasts(1, retired={"address": str})
        def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
            return data

    class Person4(rv.Aggregate):
        topic_name = "Person"
        events = Created3

        @rv.applies(Created3)
        def _c(self, e: Created3) -> None:
            pass

    new = rv.App(store=url)
    log = new.event_log(Person2)
    async with new:
        await log.append("p-1", [Created(name="A", street="s")], expected_version=0)
    newer = rv.App(store=url)
    log4 = newer.event_log(Person4)
    async with newer:
        with pytest.raises(rv.SchemaMismatchError, match="no upcaster from version 2"):
            await log4.load("p-1")

    class CreatedOld(rv.Event):  # same columns, but it claims to be version 1
        event_type = "Created"
        name: str
        street: str
        city: str = ""
        address: str | None = None

    class Person5(rv.Aggregate):
        topic_name = "Person"
        events = CreatedOld

        @rv.applies(CreatedOld)
        def _c(self, e: CreatedOld) -> None:
            pass

    stale = rv.App(store=url)
    log5 = stale.event_log(Person5)
    async with stale:
        with pytest.raises(rv.UnknownEventTypeError, match="newer than the code"):
            await log5.load("p-1")
    # version-1 code without the new columns is refused when the log is built
    older = rv.App(store=url)
    log1 = older.event_log(Person1)
    with pytest.raises(rv.SchemaMismatchError):
        await older.start()  # version 1 no longer declares street/city: refused at build
    del log1


def test_upcaster_declarations_are_checked() -> None:
    with pytest.raises(rv.SpecError, match="below schema_version"):

        class Bad(rv.Event):
            schema_version = 2
            name: str

            @rv.upcasts(2)
            def _x(data: dict[str, Any]) -> dict[str, Any]:
                return data

    with pytest.raises(rv.SpecError, match="still fields"):

        class Bad2(rv.Event):
            schema_version = 2
            name: str

            @rv.upcasts(1, retired={"name": str})
            def _x(data: dict[str, Any]) -> dict[str, Any]:
                return data
