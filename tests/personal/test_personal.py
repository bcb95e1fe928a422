"""Personal data on every store: sealed at rest, open for key holders, erased once the
subject is forgotten, on every read path (loads, reads, Arrow, collectors, DCB logs,
subscriptions), never failing a read."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.store.keys import MasterKey, is_sealed
from reventless.subscribe import Subscriptions
from tests.personal.model import (
    ADA,
    ADA_MAIL,
    ALAN,
    Customer,
    DirectoryRow,
    Move,
    Register,
    app_of,
    register_two,
)


async def stored_values(app: rv.App, topic: str, column: str) -> list[Any]:
    """The column's values as the store holds them (read back, not trusted)."""
    names = [c.name for c in app.topics[topic].schema.columns]
    at = len(rv.codec.META_NAMES) + names.index(column)
    return [r[at] for r in await app.store.read(topic, 1, 1000)]


async def test_sealed_at_rest_and_open_for_key_holders(any_url: str) -> None:
    app, customers = app_of(any_url)
    async with app:
        await register_two(customers)
        await app.settle()
        names = await stored_values(app, "Customer", "name")
        assert [is_sealed(v) for v in names] == [True, False, True]  # Moved has no name
        assert not any(ADA in str(v) for v in await app.store.read("Customer", 1, 1000))
        ada = await customers.load("c-1")
        assert (ada.name, ada.born, ada.address) == (
            ADA,
            date(1815, 12, 10),
            "12 St James's Square",
        )
        events = [e.event for e in await customers.read()]
        assert events[0].name == ADA and events[0].email == ADA_MAIL
        assert [
            e.event.name for e in [x async for x in customers.iter()] if e.type == "Registered"
        ] == [ADA, ALAN]
        (batch,) = [b async for b in customers.read_batches()]
        assert batch.column("name").to_pylist() == [ADA, None, ALAN]
        assert batch.column("born").to_pylist()[0] == "1815-12-10"
        (sealed,) = [b async for b in customers.read_batches(sealed=True)]
        assert is_sealed(sealed.column("name").to_pylist()[0])
        (some,) = [b async for b in customers.read_batches(columns=["name", "_aggregate_id"])]
        assert some.schema.names == ["name", "_aggregate_id"]  # opened, as in a full read
        assert some.column("name").to_pylist() == [ADA, None, ALAN]
        rows = {r.id: r for r in await app.tables["pd_directory"].all()}
        assert rows["c-1"].name == ADA and rows["c-1"].address == "12 St James's Square"


async def test_forget_erases_the_subject_everywhere_and_nothing_fails(any_url: str) -> None:
    app, customers = app_of(any_url)
    async with app:
        await register_two(customers)
        await app.settle()
        await customers.load("c-1")  # cached state and keys: forget must drop both
        done = await app.forget("c-1")
        assert done == rv.Forgotten(keys=1, rows=1)
        ada = await customers.load("c-1")
        assert ada.name is rv.ERASED and ada.address is rv.ERASED and ada.born is rv.ERASED
        assert ada.version == 2  # the events are all still there
        alan = await customers.load("c-2")
        assert alan.name == ALAN and alan.born == date(1912, 6, 23)
        first = (await customers.read())[0].event
        assert (first.name, first.email, first.born, first.city) == (
            rv.ERASED,
            rv.ERASED,
            rv.ERASED,
            "London",
        )
        (batch,) = [b async for b in customers.read_batches()]
        assert batch.column("name").to_pylist() == ["[erased]", None, ALAN]
        rows = {r.id: r for r in await app.tables["pd_directory"].all()}
        assert (rows["c-1"].name, rows["c-1"].address) == ("[erased]", "[erased]")
        assert rows["c-2"].name == ALAN
        # forgetting again, or a subject without a key, destroys nothing and runs the hook
        assert await app.forget("c-1") == rv.Forgotten(keys=0, rows=1)
        assert await app.forget("nobody") == rv.Forgotten(keys=0, rows=0)
        # the subject may come back: new events get a new key, old ones stay erased
        await customers.execute("c-1", Move(address="1 New Street"))
        ada = await customers.load("c-1")
        assert ada.address == "1 New Street" and ada.name is rv.ERASED
        with pytest.raises(rv.MetadataError):
            await app.forget("")


async def test_a_new_collector_catches_up_over_forgotten_data(any_url: str) -> None:
    app, customers = app_of(any_url)
    async with app:
        await register_two(customers)
        await app.settle()
        await app.forget("c-1")

    seen: list[str] = []

    class NameRow(BaseModel):
        id: str
        name: str

    names = rv.ReadModel("pd_names", row=NameRow, key="id")

    @names.on(Customer.event_classes[0])
    def _(ev: rv.Envelope[Any]) -> rv.Upsert[NameRow]:
        seen.append(ev.event.name)
        return rv.Upsert(NameRow(id=ev.event.customer_id, name=ev.event.name))

    later = rv.App(any_url, service="pd-test")
    later.event_log(Customer)
    later.collect(names)
    if any_url == "sqlite://":  # memory stores are private to one App
        return
    async with later:
        await later.settle()
        rows = {r.id: r.name for r in await later.tables["pd_names"].all()}
    assert rows == {"c-1": "[erased]", "c-2": ALAN} and seen[0] is rv.ERASED


async def test_another_process_stops_opening_once_its_cached_key_expires(shared_url: str) -> None:
    a, a_log = app_of(shared_url)
    b, b_log = app_of(shared_url)
    async with a, b:
        await register_two(a_log)
        assert (await b_log.load("c-1")).name == ADA  # b caches c-1's key
        b.store.keyring.ttl = 0.0  # as if its 30 s had passed
        await a.forget("c-1")
        b_log.forget()
        assert (await b_log.load("c-1")).name is rv.ERASED
        assert (await b_log.load("c-2")).name == ALAN


async def test_no_master_key_fails_at_start_and_builds_nothing(
    file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REVENTLESS_MASTER_KEY")
    app, _ = app_of(file_url)
    with pytest.raises(rv.KeyringError, match="REVENTLESS_MASTER_KEY"):
        await app.start()
    monkeypatch.setenv("REVENTLESS_MASTER_KEY", "not base64 !!")
    with pytest.raises(rv.KeyringError, match="base64"):
        await app_of(file_url)[0].start()
    import sqlite3

    with sqlite3.connect(file_url.removeprefix("sqlite:///")) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not any(t.startswith("ev_") or t == "rm_pd_directory" for t in tables)


async def test_the_master_key_from_a_file_and_a_wrong_one(
    file_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = MasterKey.generate()
    (tmp_path / "master.key").write_text(key.text + "\n")
    monkeypatch.delenv("REVENTLESS_MASTER_KEY")
    monkeypatch.setenv("REVENTLESS_MASTER_KEY_FILE", str(tmp_path / "master.key"))
    app, customers = app_of(file_url)
    async with app:
        await register_two(customers)
        await app.settle()
    monkeypatch.setenv("REVENTLESS_MASTER_KEY", MasterKey.generate().text)  # wins over the file
    app, customers = app_of(file_url)
    async with app:
        with pytest.raises(rv.KeyringError, match="wrong key"):
            await customers.load("c-1")
        with pytest.raises(rv.KeyringError):
            await customers.read()


class Patient(rv.Aggregate):
    """Every personal field is about the aggregate itself: snapshots are sealed with it."""

    class Admitted(rv.Event):
        name: Annotated[str, rv.Personal()]

    class Admit(rv.Command):
        name: str

    events = Admitted
    name: str = ""
    visits: int = 0

    @rv.handles(Admit)
    def admit(self, cmd: Admit) -> Admitted:
        return Patient.Admitted(name=cmd.name)

    @rv.applies(Admitted)
    def _admitted(self, e: Admitted) -> None:
        self.name, self.visits = e.name, self.visits + 1


async def test_snapshots_are_sealed_with_the_aggregate_or_not_taken(any_url: str) -> None:
    app = rv.App(any_url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=2)))
    patients = app.event_log(Patient)
    customers = app.event_log(Customer)
    async with app:
        assert patients.snapshots and not customers.snapshots
        for _ in range(3):
            await patients.execute("p-1", Patient.Admit(name=ADA))
        await customers.execute("c-1", Register(name=ADA, city="London"))
        await customers.execute("c-1", Move(address="x"))
        snap_p, _ = await app.store.load("Patient", "p-1")
        snap_c, _ = await app.store.load("Customer", "c-1")
        assert snap_p is not None and is_sealed(snap_p[2]) and ADA not in snap_p[2]
        assert snap_c is None
        with pytest.raises(rv.StoreError, match="takes no snapshots"):
            await customers.take_snapshot("c-1")
        assert await patients.take_snapshot("p-1") == 3
        patients.forget()
        assert (await patients.load("p-1")).name == ADA
        await app.forget("p-1")
        patient = await patients.load("p-1")  # the sealed snapshot is unreadable: fold all
        assert patient.name is rv.ERASED and patient.visits == 3


async def test_a_dcb_log_seals_by_a_subject_field(any_url: str) -> None:
    class Enrolled(rv.Event):
        student_id: Annotated[str, rv.Tag("student")]
        full_name: Annotated[str, rv.Personal(subject="student_id")]

    app = rv.App(any_url)
    school = app.dcb_log("pd_school", events=Enrolled)
    async with app:
        await school.append([Enrolled(student_id="s1", full_name=ADA)])
        await school.append([Enrolled(student_id="s2", full_name=ALAN)])
        q = rv.Query.of(tags=["student:s1"])
        assert [e.event.full_name for e in await school.read(q)] == [ADA]
        await app.forget("s1")
        assert (await school.read(q))[0].event.full_name is rv.ERASED
        everyone = await school.read(rv.Query.all())
        assert [e.event.full_name for e in everyone] == [rv.ERASED, ALAN]


async def test_subscriptions_show_opened_then_erased_values(shared_url: str) -> None:
    app, customers = app_of(shared_url)
    async with app:
        await register_two(customers)
        async with Subscriptions.from_url(shared_url) as subs:
            sub = await subs.create("Customer", types=["Registered"])
            page = await subs.poll(sub.id, limit=10)
            data = [e["data"] for e in page.events]
            assert [d["name"] for d in data] == [ADA, ALAN]
            assert data[0]["born"] == "1815-12-10" and data[0]["city"] == "London"
            await app.forget("c-1")
            assert subs.keyring is not None
            subs.keyring.ttl = 0.0  # another process: as if its cache had expired
            page = await subs.poll(sub.id, limit=10)
            assert [e["data"]["name"] for e in page.events] == ["[erased]", ALAN]


def test_rows_of_read_models_are_plain_columns() -> None:
    """A read-model row may reuse an annotated type: it is stored as it is (its
    on_forget hook erases it), never half-sealed."""
    from reventless.store.readmodel import read_model_table

    class Row(BaseModel):
        id: str
        name: Annotated[str, rv.Personal()]

    table = read_model_table(rv.ReadModel("pd_rows", row=Row, key="id"))
    assert [c.name for c in table.columns] == ["id", "name"]
    assert DirectoryRow.model_fields["name"].annotation is str


async def test_a_subject_has_one_key_whoever_asks_first(shared_url: str, master_key: Any) -> None:
    """Two key stores (two processes) asking for the same subjects get the same keys: the
    one that inserted first wins, the other reads it back."""
    from reventless.store.keys import SqlKeyStore

    app, _ = app_of(shared_url)
    other, _ = app_of(shared_url)
    async with app, other:
        mine = SqlKeyStore(app.store.db)  # type: ignore[attr-defined]
        theirs = SqlKeyStore(other.store.db)  # type: ignore[attr-defined]
        first = await mine.keys_for(["a", "b"])
        both = await theirs.keys_for(["b", "c", "a"])
        assert both["a"] == first["a"] and both["b"] == first["b"]
        many = await theirs.keys_for([f"s{i}" for i in range(300)])  # several statements
        assert len({kid for kid, _ in many.values()}) == 300
        assert await mine.keys_for([f"s{i}" for i in range(300)]) == many


async def test_a_batch_handler_sees_opened_then_erased_values(shared_url: str) -> None:
    """A batch handler's Arrow columns and envelopes are opened like ``read_batches`` and
    loads: the name in the clear, then erased once the subject is forgotten."""
    app, customers = app_of(shared_url)
    async with app:
        await register_two(customers)
        await app.forget("c-1")
    got: list[tuple[list[Any], list[Any]]] = []
    names = rv.SideEffectHandler("pd_batch")

    @names.on_batch(Customer.event_classes[0])
    def _(batch: rv.EventBatch[Any]) -> None:
        got.append((batch.arrow.column("name").to_pylist(), [ev.event.name for ev in batch]))

    later = rv.App(shared_url, service="pd-test")
    later.event_log(Customer)
    later.collect(names)
    async with later:
        await later.settle()
    assert got == [(["[erased]", ALAN], [rv.ERASED, ALAN])]
