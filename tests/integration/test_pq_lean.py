"""PostgreSQL's one-statement appends through libpq itself (``store/pqlean.py``): what
psycopg does to the connection around them, and a wait cut short."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

import psycopg
import pytest

import reventless as rv
from reventless.store.pqlean import LeanStatements, numbered
from tests.model import Counter, Increment, Incremented


def test_placeholders_are_numbered_and_nothing_else_is_taken() -> None:
    assert numbered("SELECT %s, x FROM t WHERE a = %s") == "SELECT $1, x FROM t WHERE a = $2"
    assert numbered("SELECT 1") == "SELECT 1"
    for sql in ("SELECT %(a)s", "SELECT '100%%'", "SELECT %s %"):
        with pytest.raises(ValueError):
            numbered(sql)


async def _stored(app: rv.App) -> list[tuple[str, int]]:
    rows = await app.store.db.read(
        lambda c: c.exec_driver_sql(
            f"SELECT _aggregate_id, _version FROM {app.store.table_of('Counter')} ORDER BY _offset"
        ).all()
    )
    return [(str(a), int(v)) for a, v in rows]


def _spy(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[tuple[Any, ...]]:
    """The arguments of every call of the async method ``owner.name`` (still called)."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    async def spy(self: Any, *args: Any) -> Any:
        calls.append(args)
        return await real(self, *args)

    monkeypatch.setattr(owner, name, spy)
    return calls


def _appends(calls: list[tuple[Any, ...]]) -> list[str]:
    """The statements among ``LeanStatements._run``'s calls that append (not reads)."""
    return [str(args[0]) for args in calls if "INSERT" in args[0]]


def _counted(monkeypatch: pytest.MonkeyPatch, marker: str) -> Callable[[], int]:
    """How many statements containing ``marker`` went through libpq so far."""
    ran = _spy(monkeypatch, LeanStatements, "_run")
    return lambda: sum(marker in args[0] for args in ran)


#: A snapshot every 3 events.
_EVERY3 = rv.AppOptions(log=rv.LogOptions(snapshot_every=3))


async def _terminate(pg_url: str, pid: int) -> None:
    """End the server session ``pid`` (as a restarted server would)."""
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _appender(app: rv.App) -> Any:
    appender = app.store._async  # type: ignore[attr-defined]
    assert appender is not None
    return appender


@pytest.mark.postgres
async def test_an_append_after_psycopg_deallocated_every_statement_lands(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg sends DEALLOCATE ALL after a rollback it runs: the lean statements are gone
    ran = _spy(monkeypatch, LeanStatements, "_run")
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment())
        await log.execute("c-1", Increment())
        assert len(_appends(ran)) == 2  # both through libpq
        aconn, _ = await _appender(app)._connection()
        await aconn.execute("DEALLOCATE ALL")
        await log.execute("c-1", Increment())
        assert len(_appends(ran)) == 4  # the statement was gone, prepared again, sent again
        assert await _stored(app) == [("c-1", 1), ("c-1", 2), ("c-1", 3)]
        await log.execute("c-2", Increment())  # and kept from then on
        assert len(_appends(ran)) == 5
        assert (await log.load("c-1")).value == 3


@pytest.mark.postgres
async def test_a_wait_cut_short_replaces_the_connection(pg_url: str) -> None:
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment())
        appender = _appender(app)
        lean = appender._lean
        assert isinstance(lean, LeanStatements)
        task = asyncio.ensure_future(lean.first_column("SELECT 1 FROM pg_sleep(1)", []))
        await asyncio.sleep(0.2)  # past the inline wait: waiting on the loop
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert lean.broken  # its answer is still on its way: the connection is not reused
        await log.execute("c-1", Increment())
        assert appender._lean is not lean
        assert await _stored(app) == [("c-1", 1), ("c-1", 2)]


@pytest.mark.postgres
async def test_a_group_of_plain_appends_is_one_statement_and_a_clash_fails_only_its_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reventless.store.pgasync import AsyncAppender

    calls = _spy(monkeypatch, AsyncAppender, "_plain_group")
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment())  # c-1 is at version 1
        got = await log.append_many((f"c-{i}", [Incremented(), Incremented()], 0) for i in range(4))
        # tried as one statement: c-1's clash undid all of it
        assert [len(reqs) for reqs, _ in calls] == [4]
        assert isinstance(got[1], rv.ConcurrencyError)
        assert [r.first_offset for r in got if not isinstance(r, Exception)] == [2, 4, 6]
        assert sorted(await _stored(app)) == sorted(
            [("c-1", 1)] + [(f"c-{i}", v) for i in (0, 2, 3) for v in (1, 2)]
        )
        got = await log.append_many((f"d-{i}", [Incremented()], 0) for i in range(5))
        assert [len(reqs) for reqs, _ in calls] == [4, 5]
        assert [r.first_offset for r in got if not isinstance(r, Exception)] == [8, 9, 10, 11, 12]
        stored = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                f"SELECT _offset FROM {app.store.table_of('Counter')} ORDER BY _offset"
            ).all()
        )
        assert [r[0] for r in stored] == list(range(1, 13))  # gapless: the clash left no hole


@pytest.mark.postgres
async def test_statements_past_the_prepared_limit_are_sent_unnamed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reventless.store.pqlean as pqlean

    monkeypatch.setattr(pqlean, "MAX_PREPARED", 1)
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        await log.execute("c-1", Increment())  # one row: the one prepared statement
        await log.append_many((f"c-{i}", [Incremented()], 0) for i in range(2, 5))  # 3 rows
        await log.append_many((f"c-{i}", [Incremented()], 0) for i in range(5, 7))  # 2 rows
        lean = _appender(app)._lean
        assert isinstance(lean, LeanStatements) and len(lean._names) == 1
        aconn, _ = await _appender(app)._connection()
        cur = await aconn.execute("SELECT count(*) FROM pg_prepared_statements WHERE name ~ '^rv_'")
        assert (await cur.fetchone())[0] == 1
        assert await _stored(app) == [(f"c-{i}", 1) for i in range(1, 7)]


async def _commands(app: rv.App) -> dict[str, tuple[Any, ...]]:
    rows = await app.store.db.read(
        lambda c: c.exec_driver_sql(
            "SELECT command_id, aggregate_id, first_offset, last_offset, version FROM rv_commands"
        ).all()
    )
    return {str(r[0]): tuple(r[1:]) for r in rows}


@pytest.mark.postgres
async def test_an_append_with_a_command_id_is_one_statement_with_its_record(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _spy(monkeypatch, LeanStatements, "_run")

    def appends() -> list[str]:
        return _appends(ran)

    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        first = await log.execute("c-1", Increment(), command_id="k-1")
        # rows and record: one statement
        assert len(appends()) == 1 and "rv_commands" in appends()[0]
        events = [Incremented(by=1), Incremented(by=2)]
        two = await log.append("c-1", events, expected_version=1, command_id="k-2")
        assert len(appends()) == 2
        assert await _commands(app) == {"k-1": ("c-1", 1, 1, 1), "k-2": ("c-1", 2, 3, 3)}
        assert (two.first_offset, two.last_offset) == (2, 3)
        real = app.store.find_command
        misses = ["k-2"]

        async def late(command_id: str) -> Any:  # misses once: a twin landed just after
            if command_id in misses:
                misses.remove(command_id)
                return None
            return await real(command_id)

        monkeypatch.setattr(app.store, "find_command", late)
        # a recorded id: the statement fails whole (nothing lands), the transaction after
        # it says it is a duplicate, and the original outcome comes back
        again = await log.append("c-1", [Incremented(by=5)], expected_version=3, command_id="k-2")
        assert len(appends()) == 3
        assert again.duplicate and (again.first_offset, again.last_offset) == (2, 3)
        # a clash with a fresh id: nothing of it lands either
        with pytest.raises(rv.ConcurrencyError):
            await log.append("c-1", [Incremented(by=7)], expected_version=1, command_id="k-3")
        assert len(appends()) == 4
        assert await _stored(app) == [("c-1", 1), ("c-1", 2), ("c-1", 3)]
        assert set(await _commands(app)) == {"k-1", "k-2"}
        assert not first.duplicate and (await log.load("c-1")).value == 4


@pytest.mark.postgres
async def test_command_ids_are_looked_up_through_libpq_and_again_after_a_lost_connection(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _spy(monkeypatch, LeanStatements, "_run")
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)
    async with app:
        # ids travel as a text array: quoting, braces and the word NULL come back as sent
        odd = ['a,"b}{\\', "NULL", "", " sp "]
        for i, cid in enumerate(odd):
            await log.execute(f"o-{i}", Increment(), command_id=cid)
        found = await asyncio.gather(*(app.store.find_command(c) for c in [*odd, "none"]))
        assert [(f.command_id, f.aggregate_id) if f else None for f in found] == [
            *((cid, f"o-{i}") for i, cid in enumerate(odd)),
            None,
        ]
        ran.clear()
        first = await log.execute("c-1", Increment(), command_id="k-1")
        lookups = [args for args in ran if "FROM rv_commands" in args[0]]
        assert len(lookups) == 1  # on the event loop, not a reader thread
        looker = app.store._looker  # type: ignore[attr-defined]
        conn, _ = await looker._connection()
        pid = conn.info.backend_pid
        await _terminate(pg_url, pid)  # the lookup connection is cut
        again = await log.execute("c-1", Increment(), command_id="k-1")
        assert again.duplicate and (again.first_offset, again.version) == (first.first_offset, 1)
        assert (await looker._connection())[0].info.backend_pid != pid  # a fresh one
        assert not first.duplicate and (await _stored(app))[-1] == ("c-1", 1)


@pytest.mark.postgres
async def test_a_group_with_command_ids_is_one_statement_and_a_recorded_id_fails_its_own(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reventless.store.append import AppendRequest, AppendResult
    from reventless.store.pgasync import AsyncAppender

    calls = _spy(monkeypatch, AsyncAppender, "_plain_group")
    app = rv.App(store=pg_url)
    log = app.event_log(Counter)

    def req(agg: str, n: int, cid: str | None) -> AppendRequest:
        rows = log._rows(agg, 0, [Incremented()] * n, rv.Metadata(), None, cid)
        return AppendRequest(log.name, rows, agg, 0, cid)

    async with app:
        await log.execute("c-0", Increment(), command_id="k-0")  # a lone append
        got = await app.store.append_many(
            [req("d-1", 2, "k-1"), req("d-2", 1, None), req("d-3", 3, "k-3")]
        )
        assert [len(reqs) for reqs, _ in calls] == [3]  # one statement
        assert [(r.first_offset, r.last_offset) for r in got] == [(2, 3), (4, 4), (5, 7)]
        assert await _commands(app) == {
            "k-0": ("c-0", 1, 1, 1),
            "k-1": ("d-1", 2, 3, 2),
            "k-3": ("d-3", 5, 7, 3),
        }
        # k-1 is recorded: the group statement writes nothing, then each request goes on
        # its own and only that one is a duplicate
        got = await app.store.append_many([req("e-1", 1, "k-1"), req("e-2", 1, "k-4")])
        assert [len(reqs) for reqs, _ in calls] == [3, 2]
        first, second = got
        assert isinstance(first, AppendResult) and first.duplicate
        assert isinstance(second, AppendResult) and not second.duplicate
        assert second.first_offset == 8  # gapless: the failed statement left no hole
        assert (await _commands(app))["k-4"] == ("e-2", 8, 8, 1)
        stored = [a for a, _ in await _stored(app)]
        assert stored == ["c-0", "d-1", "d-1", "d-2", "d-3", "d-3", "d-3", "e-2"]  # no e-1


@pytest.mark.postgres
async def test_a_load_goes_through_libpq_while_its_connection_is_free_else_a_reader_thread(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = _counted(monkeypatch, "UNION ALL")
    app = rv.App(store=pg_url, options=_EVERY3)
    log = app.event_log(Counter)
    async with app:
        assert (await log.execute("c-1", Increment(by=2))).version == 1  # a new id: loaded
        assert loads() == 1
        for by in (3, 4, 5):  # a snapshot at version 3, one event after it
            await log.execute("c-1", Increment(by=by))
        snap, rows = await app.store.load(log.name, "c-1")  # typed by psycopg's loaders
        assert snap is not None and snap[0] == 3 and [r[4] for r in rows] == [4]
        log.forget()
        through_libpq = await log.load("c-1")
        assert loads() == 3
        looker = app.store._looker  # type: ignore[attr-defined]
        async with looker._reading:  # busy: the load takes a reader thread instead
            log.forget()
            through_thread = await log.load("c-1")
        assert loads() == 3
        assert (through_libpq.value, through_libpq.version) == (14, 4)
        assert through_thread.model_dump() == through_libpq.model_dump()


@pytest.mark.postgres
async def test_load_many_is_one_statement_through_libpq_and_reads_what_a_reader_thread_does(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = _counted(monkeypatch, "json_array_elements_text")
    app = rv.App(store=pg_url, options=_EVERY3)
    log = app.event_log(Counter)
    async with app:
        for n in range(6):  # c-n: 2n events, a snapshot each 3
            for _ in range(2 * n):
                await log.execute(f"c-{n}", Increment(by=1))
        ids = [*(f"c-{n}" for n in range(6)), "nobody"]
        through_libpq = await app.store.load_many(log.name, ids)
        assert many() == 1
        looker = app.store._looker  # type: ignore[attr-defined]
        async with looker._reading:  # busy: a reader thread's transaction instead
            through_thread = await app.store.load_many(log.name, ids)
        assert many() == 1
        assert through_libpq == through_thread
        got = {a: (s and s[0], [r[4] for r in rows]) for a, (s, rows) in through_libpq.items()}
        assert got == {
            "c-0": (None, []),
            "c-1": (None, [1, 2]),
            "c-2": (3, [4]),
            "c-3": (6, []),
            "c-4": (6, [7, 8]),
            "c-5": (9, [10]),
            "nobody": (None, []),
        }
        # the looker's lookups are index lookups whatever the statistics say, also on the
        # connection that replaces a lost one
        assert await looker.read_typed("SHOW enable_seqscan", ()) == [("off",)]
        pid = (await looker._connection())[0].info.backend_pid
        await _terminate(pg_url, pid)
        assert await app.store.load_many(log.name, ids) == through_libpq
        assert many() == 3  # sent on the lost connection, then again on a new one
        assert (await looker._connection())[0].info.backend_pid != pid
        assert await looker.read_typed("SHOW enable_seqscan", ()) == [("off",)]
        log.forget()  # execute_many preloads the states the same way
        out = await log.execute_many([(a, Increment(by=1)) for a in ids])
        assert [r.version for r in out] == [1, 3, 5, 7, 9, 11, 1]  # type: ignore[union-attr]
        assert many() == 4


class Claimed(rv.Event):
    username: Annotated[str, rv.Tag("username")]


@pytest.mark.postgres
async def test_a_dcb_append_runs_through_libpq_and_a_failed_condition_rolls_back(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _spy(monkeypatch, LeanStatements, "_run")
    app = rv.App(store=pg_url)
    names = app.dcb_log("names", events=Claimed)
    never = rv.AppendCondition(rv.Query.of(tags=["username:ada"]))
    async with app:
        ran.clear()
        await names.append([Claimed(username="ada")], condition=never)
        sent = [args[0].split()[0] for args in ran]
        assert sent[0] == "BEGIN" and sent[-1] == "COMMIT"
        assert any("pg_advisory_xact_lock(" in args[0] for args in ran)  # the condition's
        ran.clear()
        with pytest.raises(rv.AppendConditionError):  # "ada" is taken: nothing lands
            await names.append([Claimed(username="ada"), Claimed(username="bob")], condition=never)
        assert [args[0].split()[0] for args in ran][-1] == "ROLLBACK"
        [conn] = app.store._dcb._idle  # type: ignore[attr-defined]  # DCB appends' own
        assert conn._lean.idle and not conn._lean.broken  # out of the transaction, kept
        await names.append([Claimed(username="bob")])  # the connection takes the next one
        got = await names.read(rv.Query.of(tags=["username:bob"]))
        assert [e.event.username for e in got] == ["bob"]
        assert [e.offset for e in await names.read(rv.Query.all())] == [1, 2]


@pytest.mark.postgres
async def test_a_dcb_append_cancelled_while_it_waits_for_a_lock_leaves_no_transaction_open(
    pg_url: str,
) -> None:
    from reventless.store.dcb import _key

    app = rv.App(store=pg_url)
    names = app.dcb_log("names", events=Claimed)
    never = rv.AppendCondition(rv.Query.of(tags=["username:ada"]))
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    async with app, await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        await names.append([Claimed(username="bob")])  # its connection is open and idle
        [conn] = app.store._dcb._idle  # type: ignore[attr-defined]
        pid = (await conn._connection())[0].info.backend_pid
        holder = await psycopg.AsyncConnection.connect(dsn)  # holds the condition's key
        await holder.execute(
            "SELECT pg_advisory_xact_lock(%s)", (_key("names", "tag", "username:ada"),)
        )
        task = asyncio.ensure_future(names.append([Claimed(username="ada")], condition=never))

        async def waiting() -> bool:
            cur = await admin.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
            )
            row = await cur.fetchone()
            return bool(row and row[0])

        async with asyncio.timeout(30):
            while not await waiting():
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.commit()  # the key is free: the cancelled session's lock is granted
        await holder.close()

        async def gone() -> bool:
            cur = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
            )
            row = await cur.fetchone()
            return bool(row and row[0] == 0)

        async with asyncio.timeout(30):  # its session ends, rolled back: nothing held
            while not await gone():
                await asyncio.sleep(0.01)
            await names.append([Claimed(username="ada")], condition=never)  # lands now
        got = await names.read(rv.Query.all())
        assert [e.event.username for e in got] == ["bob", "ada"]
        assert [e.offset for e in got] == [1, 2]


@pytest.mark.postgres
async def test_a_dcb_append_with_a_recorded_command_id_is_a_duplicate_through_libpq(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _spy(monkeypatch, LeanStatements, "_run")
    app = rv.App(store=pg_url)
    names = app.dcb_log("names", events=Claimed)
    async with app:
        first = await names.append([Claimed(username="ada")], command_id="claim-ada")
        assert any("INSERT INTO rv_commands" in args[0] for args in ran)
        real, missed = names.landed, [True]

        async def twin(command_id: str | None) -> Any:  # the lookup misses once, as when a
            if missed:  # twin in another process records the id after it
                missed.pop()
                return None
            return await real(command_id)

        monkeypatch.setattr(names, "landed", twin)
        ran.clear()
        again = await names.append([Claimed(username="ada")], command_id="claim-ada")
        assert again.duplicate and not first.duplicate
        assert (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset)
        sent = [args[0].split()[0] for args in ran]
        assert "ROLLBACK" in sent and "COMMIT" not in sent  # its rows undone
        assert [e.event.username for e in await names.read(rv.Query.all())] == ["ada"]
        record = await app.store.find_command("claim-ada")
        assert record is not None and (record.first_offset, record.last_offset) == (1, 1)
