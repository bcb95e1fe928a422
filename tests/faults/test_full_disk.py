"""A full disk under a SQLite store, and under PostgreSQL tables (issue 19, B4).

Commands fill the store until one fails. Then:

- the failure is ``rv.StoreFullError`` (a ``StoreError``), for every command of the
  failing group commit, and for further commands while the disk stays full;
- nothing is half-written: the failed commands' events are absent, every successful
  command is whole, offsets and versions are gapless, ``PRAGMA integrity_check`` is ok;
- a read model's batch commit hits the full disk too: it fails as a whole, so its rows
  still equal the fold of the log up to its stored checkpoint;
- once space returns, the same App (never restarted) runs new commands, the failed ones
  retried with their command id, and the read model catches up to the head.

Two ways to fill the disk:

- ``max_page_count`` (``sqlite:///…?max_page_count=N``): SQLite's size cap, reached
  exactly like a full disk (SQLITE_FULL). It needs no privilege, so it runs everywhere,
  CI included: it is the test that always proves the behaviour. Space comes back when
  an operator drops a ballast table (its pages go to the free list, reused by the store).
- a real tmpfs of a few MiB (``mount -t tmpfs``): the file system itself runs out, so
  the WAL's appends fail with ENOSPC. Mounting needs a privilege that most machines and CI
  containers do not grant; where it is refused this variant is skipped, because the
  ``max_page_count`` variant has already proven the same path (SQLite reports both as
  SQLITE_FULL). Space comes back when a filler file on the tmpfs is deleted. With the
  same privilege, a private PostgreSQL server keeps the store's tables in a tablespace on
  such a tmpfs: a table that cannot grow fails its transaction (SQLSTATE disk_full),
  which reaches the caller as the same ``StoreFullError``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.store.database import Database
from tests.faults import store_audit as audit
from tests.pg_private import PrivatePostgres, private_pg  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

MEMO = "m" * 1500  # events of a few KiB: the store fills in a few hundred commands
PARTS = 3  # events per command
HANG = 20.0
DEADLINE = 30.0


class Noted(rv.Event):
    amount: int
    memo: str


class Note(rv.Command):
    amount: int
    memo: str


class Ledger(rv.Aggregate):
    events = Noted
    balance: int = 0

    @rv.handles(Note)
    def note(self, cmd: Note) -> list[Noted]:
        return [Noted(amount=cmd.amount, memo=cmd.memo) for _ in range(PARTS)]

    @rv.applies(Noted)
    def _noted(self, e: Noted) -> None:
        self.balance += e.amount


class Balance(BaseModel):
    id: str
    balance: int
    events: int
    memo: str


balances: rv.ReadModel[Balance] = rv.ReadModel("ledger_balances", row=Balance, key="id")


@balances.on(Noted)
def _balance(ev: rv.Envelope[Noted], current: Balance | None) -> rv.Upsert[Balance]:
    assert ev.aggregate_id is not None
    row = current or Balance(id=ev.aggregate_id, balance=0, events=0, memo="")
    return rv.Upsert(
        Balance(
            id=row.id,
            balance=row.balance + ev.event.amount,
            events=row.events + 1,
            memo=ev.event.memo,  # large rows: the read model's commit needs new pages
        )
    )


@dataclass(slots=True)
class Sent:
    command_id: str
    amount: int
    ok: bool = False
    error: rv.ReventlessError | None = None

    @property
    def aggregate_id(self) -> str:
        return f"acct-{self.command_id}"  # a new aggregate, so a new read model row


def fold(events: list[audit.LoggedEvent]) -> dict[str, tuple[int, int]]:
    """What ``balances`` must hold: per aggregate (balance, events)."""
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        b, n = out.get(e.aggregate_id, (0, 0))
        out[e.aggregate_id] = (b + (e.by or 0), n + 1)
    return out


def stored_balances(url: str) -> dict[str, tuple[int, int]]:
    rows = audit.query(url, "SELECT id, balance, events FROM rm_ledger_balances")
    return {i: (b, n) for i, b, n in rows}


def integrity(url: str) -> list[tuple[object, ...]]:
    """SQLite's ``integrity_check`` (PostgreSQL: the log and read model checks only)."""
    if not url.startswith("sqlite"):
        return [("ok",)]
    return audit.query(url, "PRAGMA integrity_check")


def full_of(caplog: pytest.LogCaptureFixture) -> bool:
    """A collector commit (live batch or catch-up) failed on the full store."""
    return any(
        (r.exc_info is not None and isinstance(r.exc_info[1], rv.StoreFullError))
        or "the store is full" in r.getMessage()
        for r in caplog.records
        if r.name.startswith(("reventless.collect", "reventless.broker"))
    )


async def until(what: str, check: Callable[[], object], timeout: float = DEADLINE) -> None:
    """Poll ``check`` (sync or async) until it is true; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def fill_and_recover(
    url: str, free_space: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    """The scenario of the module docstring on the store at ``url``; ``free_space`` gives
    the disk its space back."""
    caplog.set_level(logging.WARNING)
    app = rv.App(
        store=url,
        options=rv.AppOptions(collector=rv.CollectorOptions(poll_interval=0.1)),
    )
    log = app.event_log(Ledger)
    view = app.collect(balances)
    sent: list[Sent] = []

    async def execute(s: Sent) -> None:
        async with asyncio.timeout(HANG):  # a hang fails the test
            await log.execute(
                s.aggregate_id,
                Note(amount=s.amount, memo=MEMO),
                command_id=s.command_id,
                meta=rv.Metadata(correlation_id=s.command_id),
            )

    async with app:
        table = app.store.table_of("Ledger")
        await log.execute("warm-up", Note(amount=1, memo="x"))
        await view.wait_caught_up()
        view.pause()  # its rows will be written once the disk is full
        full = asyncio.Event()

        async def writer(w: int) -> None:
            for i in range(1, 2000):
                if full.is_set():
                    return
                s = Sent(f"w{w}-{i}", i)
                sent.append(s)
                try:
                    await execute(s)
                    s.ok = True
                except rv.ReventlessError as exc:  # typed: anything else fails the test
                    s.error = exc
                    full.set()
            pytest.fail("the store never filled up")

        async with asyncio.TaskGroup() as tasks:
            for w in range(4):
                tasks.create_task(writer(w))

        # Alone, commands fill what the failed group left, then fail the same way; the
        # next one too: the full store stays full, and says so each time.
        for i in range(100):
            s = Sent(f"alone-{i}", i + 1)
            sent.append(s)
            try:
                await execute(s)
                s.ok = True
            except rv.ReventlessError as exc:
                s.error = exc
                break
        extra = Sent("still-full", 7)
        sent.append(extra)
        try:
            await execute(extra)
            extra.ok = True
        except rv.ReventlessError as exc:
            extra.error = exc
        failed = [s for s in sent if s.error is not None]
        print(f"full after {len(sent) - len(failed)} commands: {failed[0].error}")
        assert sent[-2].error is not None and extra.error is not None
        assert all(isinstance(s.error, rv.StoreFullError) for s in failed), [
            repr(s.error) for s in failed
        ]
        done = [s for s in sent if s.ok]  # and reads still work
        assert (await log.load(done[0].aggregate_id)).balance == PARTS * done[0].amount

        # Nothing half-written.
        events = await asyncio.to_thread(audit.logged, url, table, "amount")
        audit.check_gapless(events)
        landed = audit.by_command(events)
        assert not [s.command_id for s in failed if s.command_id in landed]
        for s in done:
            audit.check_whole(landed[s.command_id], PARTS)
        assert await asyncio.to_thread(integrity, url) == [("ok",)]

        # The read model's batch commit hits the full disk: all of it fails, or part of it
        # lands with its checkpoint; never rows without their checkpoint.
        view.resume()
        await until("a read model commit to fail on the full store", lambda: full_of(caplog))
        cp = await asyncio.to_thread(audit.checkpoint, url, "ledger_balances", "Ledger")
        assert cp < events[-1].offset
        upto = [e for e in events if e.offset <= cp]
        assert await asyncio.to_thread(stored_balances, url) == fold(upto)

        # Space comes back: the same App goes on.
        await asyncio.to_thread(free_space)
        for s in failed:  # the caller retries with the command id: it lands now, once
            await execute(s)
            s.ok = True
        for i in range(10):
            s = Sent(f"after-{i}", i + 1)
            sent.append(s)
            await execute(s)
            s.ok = True

        async def caught_up() -> bool:
            return all(v == 0 for v in (await view.lag()).values())

        await until("the read model to reach the head", caught_up)
        events = await asyncio.to_thread(audit.logged, url, table, "amount")
        audit.check_gapless(events)
        landed = audit.by_command(events)
        for s in sent:
            audit.check_whole(landed[s.command_id], PARTS)
        head = events[-1].offset
        assert await asyncio.to_thread(audit.checkpoint, url, "ledger_balances", "Ledger") == head
        assert await asyncio.to_thread(stored_balances, url) == fold(events)
        relay = app.relay
        assert relay is not None
        await until("the relay to publish the head", lambda: relay.published["Ledger"] == head)
        assert await asyncio.to_thread(integrity, url) == [("ok",)]
    # and it opens again as it was
    assert await asyncio.to_thread(integrity, url) == [("ok",)]


# -- SQLite's max_page_count: runs everywhere ----------------------------------------------


def page_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()


async def create_store(url: str) -> None:
    """Create the App's tables (start and stop it once)."""
    app = rv.App(store=url)
    app.event_log(Ledger)
    app.collect(balances)
    async with app:
        pass


def ballast(path: Path, pages: int) -> Callable[[], None]:
    """Fill ``pages`` pages of the store with a table of the operator's (on its own
    connection, which has no cap); returns what drops it again (its pages are freed)."""
    conn = sqlite3.connect(path, timeout=30)
    with conn:
        conn.execute("CREATE TABLE ballast (b BLOB)")
        conn.executemany("INSERT INTO ballast VALUES (?)", [(b"\0" * 4000,)] * pages)
    conn.close()

    def drop() -> None:
        conn = sqlite3.connect(path, timeout=30)
        try:
            conn.execute("DROP TABLE ballast")
            conn.commit()
        finally:
            conn.close()

    return drop


async def test_max_page_count_full_store_fails_typed_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    await create_store(f"sqlite:///{path}")
    drop = await asyncio.to_thread(ballast, path, 200)
    cap = await asyncio.to_thread(page_count, path) + 120
    await fill_and_recover(f"sqlite:///{path}?max_page_count={cap}", drop, caplog)


def test_max_page_count_is_a_checked_sqlite_option() -> None:
    db = Database("sqlite:///x.db?max_page_count=10")
    assert db.max_page_count == 10
    assert "max_page_count" not in db.url.query  # not passed on to the driver
    assert Database("sqlite://", rv.StoreOptions(max_page_count=64)).max_page_count == 64
    for bad in ("0", "-3", "lots"):
        with pytest.raises(rv.StoreError, match="max_page_count"):
            Database(f"sqlite:///x.db?max_page_count={bad}")
    with pytest.raises(rv.StoreError, match="SQLite"):
        Database("postgresql+psycopg://u@h/db?max_page_count=10")


# -- a real full file system: where mounting a tmpfs is permitted ---------------------------

Mount = Callable[[str | None], Path]


@pytest.fixture
def tmpfs() -> Iterator[Mount]:
    """Mounts a 9 MiB tmpfs on a fresh directory (owned by the named OS user, if given).
    Skipped where mounting is refused (an unprivileged user, a container without
    CAP_SYS_ADMIN), even under CI: the ``max_page_count`` test covers the same path
    everywhere (see the module docstring)."""
    mounted: list[Path] = []

    def mount(owner: str | None = None) -> Path:
        binary = shutil.which("mount")
        if binary is None or os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root (the max_page_count test covers this)")
        # not under pytest's tmp_path, which other users (a database server) cannot reach
        point = Path(tempfile.mkdtemp(prefix="rv-tmpfs-"))
        opts = "size=9m,mode=0700"
        if owner is not None:
            user = pwd.getpwnam(owner)
            opts += f",uid={user.pw_uid},gid={user.pw_gid}"
        got = subprocess.run(
            [binary, "-t", "tmpfs", "-o", opts, "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if got.returncode != 0:
            point.rmdir()
            pytest.skip(f"mounting a tmpfs is not permitted here: {got.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        done = subprocess.run(["umount", str(point)], capture_output=True)
        if done.returncode != 0:  # a file still open: detach now, freed when closed
            subprocess.run(["umount", "-l", str(point)], capture_output=True)
        shutil.rmtree(point, ignore_errors=True)


def filler(directory: Path) -> Callable[[], None]:
    """A 4.5 MiB file taking half of ``directory``'s file system; returns its deletion.

    Deleting it gives back as much as the store could fill: recovering can need that much
    at once. A SQLite WAL grows to ~4 MiB (1000 pages) before its automatic checkpoint
    copies those pages into the database file; with only 1.5 MiB given back, a retried
    command's commit that set off that checkpoint ran out again (1 run in ~15)."""
    path = directory / "filler"
    path.write_bytes(b"\0" * (4608 * 1024))
    return path.unlink


async def test_full_tmpfs_fails_typed_and_recovers(
    tmpfs: Mount, caplog: pytest.LogCaptureFixture
) -> None:
    disk = tmpfs(None)
    free_space = filler(disk)
    await fill_and_recover(f"sqlite:///{disk / 'store.db'}", free_space, caplog)


@pytest.mark.postgres
async def test_postgres_full_tablespace_fails_typed_and_recovers(
    tmpfs: Mount,
    private_pg: PrivatePostgres,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same on PostgreSQL: the store's tables live in a tablespace on the tmpfs (the
    server's WAL does not: PostgreSQL stops when it cannot write WAL, while a table that
    cannot grow only fails its transaction, SQLSTATE disk_full)."""
    import psycopg

    disk = tmpfs(private_pg.run_as)
    space = f"rv_small_{uuid.uuid4().hex[:8]}"
    url = await asyncio.to_thread(private_pg.create_database, "rv_full")
    database = url.rsplit("/", 1)[1]
    with psycopg.connect(private_pg.admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLESPACE {space} LOCATION '{disk}'")
    try:
        free_space = filler(disk)
        store_url = f"{url}?options=-cdefault_tablespace%3D{space}"
        await fill_and_recover(store_url, free_space, caplog)
    finally:
        with psycopg.connect(private_pg.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            conn.execute(f"DROP TABLESPACE IF EXISTS {space}")
