"""``python -m bench.core [--store sqlite|postgres|all] [--rounds N] [--quick] [--out FILE]``:
the command path's targets, side by side with eventsourcing and the raw drivers in one run.

Every row is one workload run by each contender on a fresh SQLite file (WAL,
``synchronous=FULL`` for all three) or a fresh PostgreSQL database (fsync on); the order
of the contenders rotates from round to round and the table shows the medians. Besides
the rates, the CPU time a command costs is measured on SQLite with ``synchronous=OFF``
(no fsync, so what is left is Python and SQLite's own work): reventless sequential and
with 64 commands in flight, beside raw one-row and 64-row transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import reventless as rv

from .blocks import put_block
from .extra import _es_per_tx, _raw_per_tx
from .pgserver import PgDb, PgServer
from .specs import Counter, EsApp, EsCounter, Increment, Incremented
from .workloads import (
    RAW_DATA,
    RAW_INSERT,
    Where,
    _es_load,
    _raw_catchup,
    _rv_catchup,
    _rv_conc,
    _rv_load,
    check,
    es_env,
    perf,
    raw_connect,
    rv_count,
    rv_preload,
)

SYSTEMS = ("reventless", "eventsourcing", "raw")


# -- the domain: one command, ten events ------------------------------------------------------


class Tallied(rv.Event):
    by: int = 1


class Tally(rv.Command):
    times: int = 10


class Tallies(rv.Aggregate):
    events = Tallied
    value: int = 0

    @rv.handles(Tally)
    def tally(self, cmd: Tally) -> list[Tallied]:
        return [Tallied(by=1) for _ in range(cmd.times)]

    @rv.applies(Tallied)
    def _tallied(self, e: Tallied) -> None:
        self.value += e.by


def _app(where: Where, synchronous: str = "FULL", options: rv.AppOptions | None = None) -> rv.App:
    store = where.url if isinstance(where, PgDb) else f"sqlite:///{where / 'rv.db'}"
    if not isinstance(where, PgDb):
        store += f"?synchronous={synchronous}"
    return rv.App(store=store, broker="memory://", options=options)


def _raw(where: Where, synchronous: str = "FULL") -> Any:
    if isinstance(where, PgDb):
        from . import pg

        return pg.raw_connect(where)
    con = raw_connect(where)
    con.execute(f"PRAGMA synchronous={synchronous}")
    return con


def _insert(where: Where) -> str:
    return RAW_INSERT.replace("?", "%s") if isinstance(where, PgDb) else RAW_INSERT


def _tx(con: Any, where: Where, rows: list[tuple[Any, ...]]) -> None:
    """One transaction inserting ``rows`` (executemany; psycopg pipelines it)."""
    if isinstance(where, PgDb):
        with con.transaction(), con.cursor() as cur:
            cur.executemany(_insert(where), rows)
    else:
        con.execute("BEGIN")
        con.executemany(RAW_INSERT, rows)
        con.execute("COMMIT")


# -- 1. sequential commands, one event each -----------------------------------------------------


async def _rv_seq(where: Where, n: int, ids: bool = False) -> float:
    """``n`` sequential commands on one aggregate; ``ids``: each with a fresh command id
    (looked up, then recorded with the command's rows)."""
    app = _app(where)
    log = app.event_log(Counter)
    async with app:
        await log.execute("seq-0", Increment(by=1), command_id="warm-up" if ids else None)
        cids = [f"cmd-{i}" if ids else None for i in range(n)]
        t0 = perf()
        for cid in cids:
            await log.execute("seq-0", Increment(by=1), command_id=cid)
        dt = perf() - t0
        check((await log.load("seq-0")).value == n + 1, "reventless seq value")
    return n / dt


async def _rv_seq_new(where: Where, n: int) -> float:
    """Sequential commands, each on a new aggregate: a load that finds nothing, then the
    append (raw: the same one-row transactions)."""
    app = _app(where)
    log = app.event_log(Counter)
    async with app:
        await log.execute("new-warm", Increment(by=1))
        t0 = perf()
        for i in range(n):
            await log.execute(f"new-{i}", Increment(by=1))
        dt = perf() - t0
        check(await rv_count(app) == n + 1, "reventless seq-new count")
    return n / dt


def _raw_seq_id(where: Where, n: int) -> float:
    """Raw's sequential commands with an id: the id looked up in a table of ids, then one
    transaction of the event's row and the id's row."""
    pg = isinstance(where, PgDb)
    con = _raw(where)
    mark = "%s" if pg else "?"
    con.execute(
        'CREATE TABLE IF NOT EXISTS commands (id TEXT PRIMARY KEY, "offset" BIGINT NOT NULL)'
    )
    insert = _insert(where) + (' RETURNING "offset"' if pg else "")
    record = f"INSERT INTO commands VALUES ({mark}, {mark})"
    lookup = f'SELECT "offset" FROM commands WHERE id = {mark}'
    t0 = perf()
    for v in range(1, n + 1):
        cid = f"cmd-{v}"
        check(con.execute(lookup, (cid,)).fetchone() is None, "raw seq-id lookup")
        row = ("seq-0", v, "Incremented", RAW_DATA)
        if pg:
            with con.transaction():
                offset = con.execute(insert, row).fetchone()[0]
                con.execute(record, (cid, offset))
        else:
            con.execute("BEGIN")
            offset = con.execute(insert, row).lastrowid
            con.execute(record, (cid, offset))
            con.execute("COMMIT")
    dt = perf() - t0
    check(con.execute("SELECT COUNT(*) FROM commands").fetchone()[0] == n, "raw seq-id count")
    con.close()
    return n / dt


def _rv_sql_replay(where: Where, n: int) -> float:
    """reventless's own statements of ``n`` sequential commands replayed through
    ``sqlite3`` with no framework around them: the rows its log builds (drawn before the
    clock starts), each in ``BEGIN IMMEDIATE``, the store's INSERT (a NULL offset: the
    rowid), ``COMMIT``, as the store's hot path issues them. The floor the framework
    adds its Python to, beside raw's four-column rows."""
    assert isinstance(where, Path)

    async def prepare() -> tuple[str, str, list[tuple[Any, ...]]]:
        app = _app(where)
        log = app.event_log(Counter)
        async with app:
            await log.execute("seq-0", Increment(by=1))
            store: Any = app.store
            sql: str = store._entry(log.name).info.insert_sql
            made = [
                log._rows("seq-0", v, [Incremented(by=1)], rv.Metadata(), None, None)
                for v in range(1, n + 1)
            ]
            return sql, store.table_of(log.name), [(None, *r[0]) for r in made]

    sql, table, rows = asyncio.run(prepare())
    con = sqlite3.connect(where / "rv.db", isolation_level=None)
    con.execute("PRAGMA synchronous=FULL")
    cur = con.cursor()
    t0 = perf()
    for row in rows:
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(sql, row)
        cur.execute("COMMIT")
    dt = perf() - t0
    check(cur.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0] == n + 1, "replay count")
    con.close()
    return n / dt


# -- 2. one command, ten events ----------------------------------------------------------------


async def _rv_exec10(where: Where, n: int) -> float:
    app = _app(where)
    log = app.event_log(Tallies)
    async with app:
        await log.execute("t-0", Tally(times=1))
        t0 = perf()
        for _ in range(n):
            await log.execute("t-0", Tally(times=10))
        dt = perf() - t0
        check((await log.load("t-0")).value == n * 10 + 1, "reventless exec10 value")
    return n * 10 / dt


# -- 3. 64 commands in flight -------------------------------------------------------------------


def _raw_rows(where: Where, n_tx: int, per: int, synchronous: str = "FULL") -> float:
    """``n_tx`` transactions of ``per`` one-event rows (new versions of ``per`` streams)."""
    con = _raw(where, synchronous)
    t0 = perf()
    for t in range(n_tx):
        _tx(con, where, [(f"r-{i}", t, "Incremented", json.dumps({"by": 1})) for i in range(per)])
    dt = perf() - t0
    con.close()
    return n_tx * per / dt


# -- 4. many new aggregates at once -------------------------------------------------------------


async def new_aggregates(
    log: rv.EventLog[Counter], bulk: str, call: int, per_call: int
) -> list[Any]:
    """One call creating ``per_call`` new aggregates of one event each: ``execute_many``
    (commands) or ``append_many`` (the bulk path without commands, what
    ``app.save(*aggregates)`` does for eventsourcing)."""
    if bulk == "execute_many":
        return await log.execute_many((f"new-{call}-{i}", Increment(by=1)) for i in range(per_call))
    got = await log.append_many(
        (f"new-{call}-{i}", [Incremented(by=1)], 0) for i in range(per_call)
    )
    return list(got)


async def _rv_many_new(where: Where, calls: int, per_call: int, bulk: str) -> float:
    app = _app(where)
    log = app.event_log(Counter)
    async with app:
        await log.execute("warm", Increment(by=1))
        t0 = perf()
        for c in range(calls):
            got = await new_aggregates(log, bulk, c, per_call)
            check(len(got) == per_call, f"reventless {bulk} results")
        dt = perf() - t0
        check(await rv_count(app) == calls * per_call + 1, f"reventless {bulk} count")
    return calls * per_call / dt


def _es_many_new(where: Where, calls: int, per_call: int) -> float:
    app = EsApp(env=es_env(where))
    try:
        app.save(EsCounter())
        t0 = perf()
        for _ in range(calls):
            app.save(*(EsCounter() for _ in range(per_call)))  # one event (created) each
        dt = perf() - t0
        n = app.recorder.max_notification_id()
        check(n == calls * per_call + 1, "eventsourcing many_new count")
    finally:
        app.close()
    return calls * per_call / dt


def _raw_many_new(where: Where, calls: int, per_call: int) -> float:
    con = _raw(where)
    t0 = perf()
    for c in range(calls):
        _tx(con, where, [(f"new-{c}-{i}", 1, "Incremented", RAW_DATA) for i in range(per_call)])
    dt = perf() - t0
    con.close()
    return calls * per_call / dt


# -- 5. read the log as Arrow -------------------------------------------------------------------


async def warm_helpers(app: rv.App) -> None:
    """Start the store's Arrow helper processes and wait until they are ready, outside
    the timer as raw's connection is opened outside it (a process's first long read starts
    them itself and reads rows until they are ready, a few tenths of a second)."""
    pool = getattr(app.store._arrow, "_helpers", None)  # type: ignore[attr-defined]
    if pool is None:
        return
    pool.warm()
    async with asyncio.timeout(60):
        while pool.ready() < 2:
            await asyncio.sleep(0.01)


#: The columns raw's pages hold: offset, aggregate id, version, type and the event's data.
RAW_COLUMNS = ["_offset", "_aggregate_id", "_version", "_type", "by"]


async def _rv_read_arrow(
    where: Where, aggs: int, per: int, arrow: bool = True, columns: list[str] | None = None
) -> float:
    """``read_batches`` of the preloaded log; ``arrow=False`` turns the store's Arrow
    reader off (the batches are built from SQL rows, as without the ``arrow`` extra);
    ``columns``: only those."""
    app = _app(where)
    log = app.event_log(Counter)
    if not arrow:
        store: Any = app.store
        store.stream_columns = lambda t, f, n, upto=None, columns=None: store.stream(
            t, f, n, upto=upto
        )
    async with app:
        await rv_preload(log, "rd", aggs, per)
        # warm-up: the store's first read (its statements prepared), as raw's connection
        # is opened before its clock starts
        async for _ in log.read_batches(upto=2, batch_size=1):
            pass
        await warm_helpers(app)  # its Arrow helper processes, started
        t0 = perf()
        n = 0
        async for batch in log.read_batches(columns=columns):
            n += batch.num_rows
        dt = perf() - t0
    check(n == aggs * per, "reventless read_batches count")
    return n / dt


def _es_read_raw(where: Where, aggs: int, per: int) -> float:
    app = EsApp(env=es_env(where))
    try:
        counters = [EsCounter() for _ in range(aggs)]
        for c in counters:
            for _ in range(per - 1):
                c.increment(by=1)
        for i in range(0, aggs, 10):
            app.save(*counters[i : i + 10])
        t0 = perf()
        n, position = 0, 0
        while True:  # stored notifications, not turned into domain events
            notes = app.recorder.select_notifications(
                start=position, limit=1000, inclusive_of_start=False
            )
            if not notes:
                break
            n += len(notes)
            position = notes[-1].id
        dt = perf() - t0
    finally:
        app.close()
    check(n == aggs * per, "eventsourcing read count")
    return n / dt


def _raw_read_rows(where: Where, aggs: int, per: int) -> float:
    con = _raw(where)
    rows = [(f"rd-{i}", v, "Incremented", RAW_DATA) for i in range(aggs) for v in range(1, per + 1)]
    _tx(con, where, rows)
    mark = "%s" if isinstance(where, PgDb) else "?"
    select = (
        'SELECT "offset", aggregate_id, version, type, data FROM events '
        f'WHERE "offset" > {mark} ORDER BY "offset" LIMIT 1000'
    )
    t0 = perf()
    n = last = 0
    while True:
        page = con.execute(select, (last,)).fetchall()
        if not page:
            break
        n += len(page)
        last = page[-1][0]
    dt = perf() - t0
    con.close()
    check(n == aggs * per, "raw read count")
    return n / dt


# -- 6. collector catch-up with a counting handler ---------------------------------------------


async def count_catch_up(
    app: rv.App,
    name: str = "count",
    timeout: float = 600,
    *,
    batch: bool = False,
    columns: list[str] | None = None,
) -> tuple[int, float]:
    """Start ``app`` with a side effect counting every ``Incremented`` from offset 0 (a
    durable checkpoint per page), settle; the events it counted and the seconds taken.
    ``batch``: a batch handler (``on_batch``) counts a page of columns per call (only
    ``columns``, if given)."""
    app.event_log(Counter)
    counter = rv.SideEffectHandler(name)
    seen = [0]
    if batch:

        @counter.on_batch(Incremented, columns=columns)
        async def _count_batch(batch: rv.EventBatch[Incremented]) -> None:
            seen[0] += len(batch)

    else:

        @counter.on(Incremented)
        async def _count(ev: rv.Envelope[Incremented]) -> None:
            seen[0] += 1

    app.collect(counter)
    t0 = perf()
    await app.start()
    try:
        await app.settle(timeout=timeout)
        return seen[0], perf() - t0
    finally:
        await app.stop()


async def _preload_interleaved(log: rv.EventLog[Counter], aggs: int, per: int) -> None:
    """``aggs`` aggregates of ``per`` events each, round-robin: one event of each
    aggregate in turn, as a log of many independent commands holds them (every page of a
    catch-up then holds events of as many aggregates as it has events, up to ``aggs``)."""
    event = [Incremented(by=1)]
    for v in range(per):
        await log.append_many((f"cu-{i}", event, v) for i in range(aggs))


async def _rv_catchup_count(
    where: Where,
    aggs: int,
    per: int,
    batch: bool = False,
    columns: list[str] | None = None,
    interleaved: bool = False,
) -> float:
    pre = _app(where)
    log = pre.event_log(Counter)
    async with pre:
        if interleaved:
            await _preload_interleaved(log, aggs, per)
        else:
            await rv_preload(log, "cu", aggs, per)
    seen, dt = await count_catch_up(_app(where), batch=batch, columns=columns)
    check(seen == aggs * per, "reventless counting catch-up")
    return aggs * per / dt


def _raw_catchup_rows(where: Where, aggs: int, per: int) -> float:
    """Raw read, fetch the page's current rows, upsert them and the checkpoint per page."""
    if isinstance(where, PgDb):
        from . import pg

        return pg._raw_catchup(where, aggs, per)
    return _raw_catchup(where, aggs, per)


def _raw_catchup_count(
    where: Where, aggs: int, per: int, page: int = 2000, interleaved: bool = False
) -> float:
    """Read pages and commit the checkpoint after each: the floor of a durable handler."""
    con = _raw(where)
    rows = [(f"cu-{i}", v, "Incremented", RAW_DATA) for i in range(aggs) for v in range(1, per + 1)]
    if interleaved:  # one event of each aggregate in turn
        rows.sort(key=lambda r: r[1])
    _tx(con, where, rows)
    con.close()
    pg = isinstance(where, PgDb)
    mark = "%s" if pg else "?"
    t0 = perf()
    con = _raw(where)
    con.execute(
        "CREATE TABLE IF NOT EXISTS checkpoints (name TEXT PRIMARY KEY, position BIGINT NOT NULL)"
    )
    position = n = 0
    while True:
        rows = con.execute(
            'SELECT "offset", aggregate_id, version, type, data FROM events '
            f'WHERE "offset" > {mark} ORDER BY "offset" LIMIT {mark}',
            (position, page),
        ).fetchall()
        if not rows:
            break
        n += len(rows)
        position = rows[-1][0]
        upsert = (
            f"INSERT INTO checkpoints VALUES ('count', {mark}) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position"
        )
        if pg:
            with con.transaction():
                con.execute(upsert, (position,))
        else:
            con.execute("BEGIN IMMEDIATE")
            con.execute(upsert, (position,))
            con.execute("COMMIT")
    dt = perf() - t0
    con.close()
    check(n == aggs * per, "raw counting catch-up")
    return aggs * per / dt


# -- 7. load with a snapshot at the head -------------------------------------------------------


def _raw_load_any(where: Where, n_events: int, repeats: int) -> float:
    """Raw's load with a snapshot at the head: its snapshot row, then the rows after it."""
    if isinstance(where, PgDb):
        from . import pg

        return pg._raw_load(where, n_events, repeats, True)
    from .workloads import _raw_load

    return _raw_load(where, n_events, repeats, True)


# -- CPU per command (SQLite, synchronous=OFF) ---------------------------------------------------


def _per_op(c0: float, n: int) -> float:
    """Microseconds of this process's CPU time (all threads) per operation since ``c0``."""
    return (time.process_time() - c0) / n * 1e6


async def streams(
    log: rv.EventLog[Counter], workers: int, per: int, start: Callable[[], None]
) -> None:
    """``workers`` concurrent streams of ``per`` commands, each on its own aggregate: one
    warm-up command each, then ``start()``, then the streams (what is timed)."""

    async def worker(i: int) -> None:
        for _ in range(per):
            await log.execute(f"w-{i}", Increment(by=1))

    await asyncio.gather(*(log.execute(f"w-{i}", Increment(by=1)) for i in range(workers)))
    start()
    await asyncio.gather(*(worker(i) for i in range(workers)))


async def _rv_cpu(where: Path, workers: int, per: int, synchronous: str = "OFF") -> float:
    """CPU per command of ``workers`` concurrent streams of ``per`` commands (the App
    started and warm: its start-up is not counted)."""
    app = _app(where, synchronous)
    log = app.event_log(Counter)
    c0 = 0.0

    def mark() -> None:
        nonlocal c0
        c0 = time.process_time()

    async with app:
        await streams(log, workers, per, mark)
        return _per_op(c0, workers * per)


def _raw_cpu(where: Path, n_tx: int, per: int, synchronous: str = "OFF") -> float:
    con = _raw(where, synchronous)
    c0 = time.process_time()
    for t in range(n_tx):
        _tx(con, where, [(f"r-{i}", t, "Incremented", RAW_DATA) for i in range(per)])
    got = _per_op(c0, n_tx * per)
    con.close()
    return got


def _cpu_rows(where: Path, n: int) -> dict[str, float]:
    per = max(1, n // 64)
    for sub in ("a", "b", "c", "d", "e", "f"):
        (where / sub).mkdir()
    return {
        "reventless, sequential": asyncio.run(_rv_cpu(where / "a", 1, n)),
        "reventless, 64 in flight": asyncio.run(_rv_cpu(where / "b", 64, per)),
        "raw, 1-row transactions": _raw_cpu(where / "c", n, 1),
        "raw, 64-row transactions": _raw_cpu(where / "d", per, 64),
        "reventless, sequential, `synchronous=FULL`": asyncio.run(
            _rv_cpu(where / "e", 1, n, "FULL")
        ),
        "raw, 1-row transactions, `synchronous=FULL`": _raw_cpu(where / "f", n, 1, "FULL"),
    }


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    key: str
    title: str
    unit: str
    run: dict[str, Callable[[Where], float]]
    target: str  # what the issue asks, e.g. "rv/es >= 1.5"
    es_min: float | None = None
    raw_min: float | None = None


def rows(quick: bool, pg: bool) -> list[Row]:
    seq = 300 if quick else (1000 if pg else 3000)
    ex10 = 100 if quick else (300 if pg else 1000)
    w, per = 64, (5 if quick else 150)
    grown = 30 if quick else 300
    calls, per_call = (2, 500) if quick else (20, 1000)
    ra, rp = (20, 500) if quick else (100, 1000)
    ca, cp = (50, 100) if quick else (3000, 100)
    loads = 100 if quick else 1000

    def arun(fn: Callable[..., Any], *a: Any) -> Callable[[Where], float]:
        return lambda p: float(asyncio.run(fn(p, *a)))

    return [
        Row(
            "seq1",
            "sequential commands, 1 event each (`execute`)",
            "cmd/s",
            {
                "reventless": arun(_rv_seq, seq),
                "eventsourcing": lambda p: _es_per_tx(p, seq, 1),
                "raw": lambda p: _raw_per_tx(p, seq, 1),
            },
            ">= 1.5x es, >= 85% raw",
            1.5,
            0.85,
        ),
        Row(
            "seq1_new",
            "sequential commands, each on a new aggregate (`execute`: a load that finds "
            "nothing, then the append; raw: one-row transactions)",
            "cmd/s",
            {
                "reventless": arun(_rv_seq_new, seq),
                "raw": lambda p: _raw_per_tx(p, seq, 1),
            },
            "(reference)",
        ),
        Row(
            "seq1_id",
            "sequential commands, 1 event each, each with a command id (`execute(..., "
            "command_id=...)`; raw: a lookup, then the row and the id's row in one transaction)",
            "cmd/s",
            {
                "reventless": arun(_rv_seq, seq, True),
                "raw": lambda p: _raw_seq_id(p, seq),
            },
            "(reference)",
        ),
        *(
            []
            if pg
            else [
                Row(
                    "seq1_sql",
                    "the same commands' own SQL replayed by hand (sqlite3, no framework)",
                    "cmd/s",
                    {
                        "reventless": lambda p: _rv_sql_replay(p, seq),
                        "raw": lambda p: _raw_per_tx(p, seq, 1),
                    },
                    "(reference: the floor under `seq1`)",
                )
            ]
        ),
        Row(
            "exec10",
            "one command -> 10 events (`execute`)",
            "events/s",
            {
                "reventless": arun(_rv_exec10, ex10),
                "eventsourcing": lambda p: _es_per_tx(p, ex10, 10),
                "raw": lambda p: _raw_per_tx(p, ex10, 10),
            },
            ">= 1.5x es",
            1.5,
        ),
        Row(
            "inflight64",
            "64 commands in flight (raw: 64 rows per transaction)",
            "cmd/s",
            {
                "reventless": arun(_rv_conc, w, per),
                "raw": lambda p: _raw_rows(p, per * 2, 64),
            },
            ">= 40% raw",
            None,
            0.40,
        ),
        Row(
            "inflight64_id",
            "64 commands in flight, each with a command id (raw: 64 rows per transaction)",
            "cmd/s",
            {
                "reventless": arun(_rv_conc, w, per, "FULL", True),
                "raw": lambda p: _raw_rows(p, per * 2, 64),
            },
            "(reference)",
        ),
        Row(
            "inflight64_grown",
            f"64 commands in flight, {grown} per stream (the log grows to {w * grown:,} events, "
            "a group's rows land on many index pages; raw: 64 rows per transaction, as many)",
            "cmd/s",
            {
                "reventless": arun(_rv_conc, w, grown),
                "raw": lambda p: _raw_rows(p, grown, 64),
            },
            "(reference)",
        ),
        Row(
            "load_snap",
            f"load a 1000-event aggregate with a snapshot at its head ({loads} loads, "
            "`load` after `forget`)",
            "loads/s",
            {
                "reventless": arun(_rv_load, 1000, loads, 100),
                "eventsourcing": lambda p: _es_load(p, 1000, loads, True),
                "raw": lambda p: _raw_load_any(p, 1000, loads),
            },
            ">= 1x es",
            1.0,
        ),
        Row(
            "many_new",
            f"{per_call} new aggregates per call, {calls} calls (`execute_many`)",
            "events/s",
            {
                "reventless": arun(_rv_many_new, calls, per_call, "execute_many"),
                "eventsourcing": lambda p: _es_many_new(p, calls, per_call),
                "raw": lambda p: _raw_many_new(p, calls, per_call),
            },
            ">= 2x es",
            2.0,
        ),
        Row(
            "many_append",
            f"{per_call} new aggregates per call, {calls} calls (`append_many`)",
            "events/s",
            {
                "reventless": arun(_rv_many_new, calls, per_call, "append_many"),
                "eventsourcing": lambda p: _es_many_new(p, calls, per_call),
                "raw": lambda p: _raw_many_new(p, calls, per_call),
            },
            ">= 2x es",
            2.0,
        ),
        Row(
            "read_arrow",
            f"read {ra * rp:,} events: `read_batches()` (Arrow) vs stored rows",
            "events/s",
            {
                "reventless": arun(_rv_read_arrow, ra, rp),
                "eventsourcing": lambda p: _es_read_raw(p, ra, rp),
                "raw": lambda p: _raw_read_rows(p, ra, rp),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
        Row(
            "read_arrow_cols",
            f"read {ra * rp:,} events, raw's five columns: `read_batches(columns=[...])`",
            "events/s",
            {
                "reventless": arun(_rv_read_arrow, ra, rp, True, RAW_COLUMNS),
                "raw": lambda p: _raw_read_rows(p, ra, rp),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
        Row(
            "read_rows",
            "the same `read_batches()` built from SQL rows (the Arrow reader off)",
            "events/s",
            {
                "reventless": arun(_rv_read_arrow, ra, rp, False),
                "raw": lambda p: _raw_read_rows(p, ra, rp),
            },
            "(reference)",
        ),
        Row(
            "catchup_count",
            f"catch-up of {ca * cp:,} events, counting handler, durable checkpoint",
            "events/s",
            {
                "reventless": arun(_rv_catchup_count, ca, cp),
                "raw": lambda p: _raw_catchup_count(p, ca, cp),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
        Row(
            "catchup_inter",
            f"the same, the {ca:,} aggregates' events interleaved (one of each in turn)",
            "events/s",
            {
                "reventless": lambda p: float(
                    asyncio.run(_rv_catchup_count(p, ca, cp, interleaved=True))
                ),
                "raw": lambda p: _raw_catchup_count(p, ca, cp, interleaved=True),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
        Row(
            "catchup_upsert",
            f"catch-up of {ca * cp:,} events into a read model, a row upsert per event",
            "events/s",
            {
                "reventless": arun(_rv_catchup, ca, cp, "handler"),
                "raw": lambda p: _raw_catchup_rows(p, ca, cp),
            },
            ">= 50% raw",
            None,
            0.50,
        ),
        Row(
            "catchup_fold",
            f"the same read model declared with `rv.ColumnUpserts` ({ca * cp:,} events)",
            "events/s",
            {
                "reventless": arun(_rv_catchup, ca, cp, "fold"),
                "raw": lambda p: _raw_catchup_rows(p, ca, cp),
            },
            ">= 50% raw",
            None,
            0.50,
        ),
        Row(
            "catchup_batch",
            f"catch-up of {ca * cp:,} events, counting batch handler (`on_batch`)",
            "events/s",
            {
                "reventless": arun(_rv_catchup_count, ca, cp, True),
                "raw": lambda p: _raw_catchup_count(p, ca, cp),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
        Row(
            "catchup_batch_cols",
            "the same, the handler reading raw's columns (`on_batch(..., columns=['by'])`)",
            "events/s",
            {
                "reventless": arun(_rv_catchup_count, ca, cp, True, ["by"]),
                "raw": lambda p: _raw_catchup_count(p, ca, cp),
            },
            ">= 70% raw",
            None,
            0.70,
        ),
    ]


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def table(store: str, plan: list[Row], got: dict[str, dict[str, list[float]]]) -> str:
    lines = [
        f"| workload ({store}) | unit | reventless | eventsourcing | raw | rv/es | rv/raw "
        "| target | verdict |",
        "|---|---|--:|--:|--:|--:|--:|---|---|",
    ]
    for r in plan:
        med = {s: statistics.median(v) if v else None for s, v in got[r.key].items()}
        rv_, es, raw = med.get("reventless"), med.get("eventsourcing"), med.get("raw")
        ok = rv_ is not None
        verdict = "met"
        if r.es_min is None and r.raw_min is None:
            verdict = "-"  # a reference row: no target of its own
        if r.es_min is not None:
            ok = ok and es is not None and rv_ is not None and rv_ / es >= r.es_min
        if r.raw_min is not None:
            ok = ok and raw is not None and rv_ is not None and rv_ / raw >= r.raw_min
        lines.append(
            f"| {r.title} | {r.unit} | {_fmt(rv_)} | {_fmt(es)} | {_fmt(raw)} "
            f"| {_ratio(rv_, es)} | {_ratio(rv_, raw)} | {r.target} "
            f"| {verdict if ok else 'NOT met'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.core", description=__doc__)
    ap.add_argument("--store", choices=("sqlite", "postgres", "all"), default="all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated row keys")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    stores = ["sqlite", "postgres"] if a.store == "all" else [a.store]
    only = {k for k in a.only.split(",") if k}
    plans = {
        s: [r for r in rows(a.quick, s == "postgres") if not only or r.key in only] for s in stores
    }
    got: dict[str, dict[str, dict[str, list[float]]]] = {
        s: {r.key: {} for r in plan} for s, plan in plans.items()
    }
    cpu: dict[str, list[float]] = {}
    started = perf()
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rvcore-")))
        server = stack.enter_context(PgServer()) if "postgres" in stores else None
        for rnd in range(a.rounds):
            order = SYSTEMS[rnd % 3 :] + SYSTEMS[: rnd % 3]
            for store, plan in plans.items():
                for r in plan:
                    for system in order:
                        fn = r.run.get(system)
                        if fn is None:
                            continue
                        where: Where
                        if server is not None and store == "postgres":
                            where = server.new_db(f"{r.key}_{system[:3]}")
                            server.checkpoint()
                        else:
                            where = Path(tempfile.mkdtemp(dir=root))
                        gc.collect()
                        v = fn(where)
                        got[store][r.key].setdefault(system, []).append(v)
                        print(
                            f"round {rnd + 1}/{a.rounds} {store:<8} {r.key:<14} {system:<13} "
                            f"{v:>12,.0f} {r.unit}",
                            flush=True,
                        )
            if "sqlite" in stores and (not only or "cpu" in only):
                for k, v in _cpu_rows(
                    Path(tempfile.mkdtemp(dir=root)), 300 if a.quick else 3000
                ).items():
                    cpu.setdefault(k, []).append(v)
                    print(f"round {rnd + 1}/{a.rounds} cpu      {k:<28} {v:8.1f} us/op")
    command = "python -m bench.core" + (f" --store {a.store}" if a.store != "all" else "")
    command += f" --rounds {a.rounds}" + (" --quick" if a.quick else "")
    command += f" --only {a.only}" if a.only else ""
    parts = [
        "## Command path: the performance targets",
        "",
        f"Command: `{command}` ({a.rounds} rounds, contenders interleaved, medians; "
        f"{perf() - started:.0f} s). SQLite: WAL and `synchronous=FULL` for all three; "
        "PostgreSQL: the server's defaults (fsync on, synchronous_commit on).",
        "",
    ]
    for store, plan in plans.items():
        parts += [table(store, plan, got[store]), ""]
    if cpu:
        parts += [
            "CPU time per command (SQLite, `synchronous=OFF` unless the row says `FULL`, "
            "`time.process_time` of the whole process, its writer thread included, around "
            "the timed commands only: the App is started and warm; at `FULL` it includes "
            "the kernel's time in each commit's fsync):",
            "",
            "| path | us CPU per command (median) |",
            "|---|--:|",
            *(f"| {k} | {statistics.median(v):.1f} |" for k, v in cpu.items()),
        ]
    text = "\n".join(parts)
    print("\n" + text)
    if a.out is not None:
        put_block(a.out, "core", text)


if __name__ == "__main__":
    main()
