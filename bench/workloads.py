"""The workloads: one function per (workload, contender), each on a fresh SQLite file.

Every function takes a fresh directory and returns a throughput (operations per
second, the unit of its workload). Setup (schema creation, preloading, warm-up)
is outside the timed region; a sanity check after it verifies what was written.

The reventless and eventsourcing functions also accept a fresh PostgreSQL database
(``PgDb``) instead of the directory: ``pg.py`` reuses them for ``--store postgres``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventsourcing.persistence import InfrastructureFactory, Tracking
from eventsourcing.projection import ProjectionRunner
from eventsourcing.utils import Environment

import reventless as rv

from .pgserver import PgDb
from .specs import (
    VIEWS,
    Counter,
    EsApp,
    EsCounter,
    EsSnapApp,
    Increment,
    Incremented,
    SQLiteTotalsRecorder,
    TotalsProjection,
)

SYSTEMS = ("reventless", "eventsourcing", "raw")
STORES = ("sqlite", "postgres")
Where = Path | PgDb  # a fresh SQLite directory or a fresh PostgreSQL database
Runner = Callable[[Any], float]
perf = time.perf_counter


@dataclass(frozen=True)
class Sizes:
    seq_commands: int = 3000
    conc_workers: int = 64
    conc_per_worker: int = 100
    batch_tx: int = 500
    bulk_aggs: int = 100
    bulk_per_agg: int = 1000
    bulk_big_call: int = 10_000
    load_events: int = 1000
    load_repeats: int = 30
    catchup_aggs: int = 500
    catchup_aggs_es: int = 200
    catchup_per_agg: int = 100
    bulk_aggs_es: int | None = None  # eventsourcing's bulk_concurrent, if not bulk_aggs

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            seq_commands=150,
            conc_workers=64,
            conc_per_worker=5,
            batch_tx=40,
            bulk_aggs=10,
            bulk_per_agg=1000,
            bulk_big_call=5000,
            load_events=1000,
            load_repeats=5,
            catchup_aggs=50,
            catchup_aggs_es=10,
            catchup_per_agg=100,
        )

    @classmethod
    def postgres(cls, quick: bool = False) -> Sizes:
        """PostgreSQL: a commit costs more (fsync + a round trip), so fewer of them."""
        if quick:
            return cls(
                seq_commands=100,
                conc_workers=64,
                conc_per_worker=5,
                batch_tx=30,
                bulk_aggs=10,
                bulk_per_agg=1000,
                bulk_big_call=5000,
                load_events=1000,
                load_repeats=5,
                catchup_aggs=50,
                catchup_aggs_es=5,
                catchup_per_agg=100,
            )
        return cls(
            seq_commands=2000,
            conc_workers=64,
            conc_per_worker=100,
            batch_tx=500,
            bulk_aggs=100,
            bulk_per_agg=1000,
            bulk_big_call=10_000,
            load_events=1000,
            load_repeats=30,
            catchup_aggs=500,
            catchup_aggs_es=30,
            catchup_per_agg=100,
            # psycopg 3.3 deadlocks in pipeline mode on one ~6 MB message: eventsourcing's
            # app.save() of 50k+ events hangs in Pipeline.sync() (40k passed; see pg.py).
            bulk_aggs_es=20,
        )


@dataclass
class Workload:
    key: str
    title: str
    unit: str
    run: dict[str, Runner]
    timed: dict[str, str]
    sizes: dict[str, str] = field(default_factory=dict)
    peer_from: str | None = None  # peers' numbers are taken from this workload's row
    latency: bool = False  # also report ms per operation
    borrow: dict[str, str] = field(default_factory=dict)  # system -> row its number is from
    store: str = "sqlite"

    def source(self, system: str) -> str | None:
        """The workload whose number is shown for ``system`` when it is not measured here."""
        if system in self.borrow:
            return self.borrow[system]
        return self.peer_from if system != "reventless" else None


# -- shared helpers ---------------------------------------------------------------------------


def rv_app(where: Where, snapshot_every: int = 0, synchronous: str = "FULL") -> rv.App:
    if isinstance(where, PgDb):
        store = where.url
    else:
        store = f"sqlite:///{where / 'rv.db'}?synchronous={synchronous}"
    return rv.App(
        store=store,
        broker="memory://",
        options=rv.AppOptions(log=rv.LogOptions(snapshot_every=snapshot_every)),
    )


def es_env(where: Where) -> dict[str, str]:
    if isinstance(where, PgDb):
        return where.es_env()
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(where / "es.db")}


RAW_INSERT = "INSERT INTO events (aggregate_id, version, type, data) VALUES (?, ?, ?, ?)"
RAW_DATA = json.dumps({"by": 1})


def raw_connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path / "raw.db", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.execute(
        'CREATE TABLE IF NOT EXISTS events ("offset" INTEGER PRIMARY KEY, '
        "aggregate_id TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL, "
        "data TEXT NOT NULL, UNIQUE (aggregate_id, version))"
    )
    return con


def raw_count(con: sqlite3.Connection) -> int:
    return int(con.execute("SELECT COUNT(*) FROM events").fetchone()[0])


def check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"sanity check failed: {what}")


def run_async(fn: Callable[..., Any], *args: Any) -> float:
    return float(asyncio.run(fn(*args)))


async def rv_count(app: rv.App) -> int:
    return sum((await app.store.heads()).values())


async def rv_preload(log: rv.EventLog[Counter], prefix: str, aggs: int, per: int) -> None:
    """``aggs`` aggregates of ``per`` events each, appended 100 aggregates at a time."""
    events = [Incremented(by=1) for _ in range(per)]
    for start in range(0, aggs, 100):
        await asyncio.gather(
            *(
                log.append(f"{prefix}-{i}", events, expected_version=0)
                for i in range(start, min(aggs, start + 100))
            )
        )


def es_counters(aggs: int, per: int) -> list[EsCounter]:
    """``aggs`` unsaved counters of ``per`` events each (Created + increments)."""
    counters = []
    for _ in range(aggs):
        c = EsCounter()
        for _ in range(per - 1):
            c.increment(by=1)
        counters.append(c)
    return counters


# -- 1. per-command append, sequential --------------------------------------------------------


async def _rv_seq(path: Where, n: int) -> float:
    app = rv_app(path)
    log = app.event_log(Counter)
    async with app:
        await log.execute("seq-0", Increment(by=1))  # warm-up: first command loads + caches
        t0 = perf()
        for _ in range(n):
            await log.execute("seq-0", Increment(by=1))
        dt = perf() - t0
        check((await log.load("seq-0")).value == n + 1, "reventless seq value")
    return n / dt


def _es_seq(path: Where, n: int) -> float:
    app = EsApp(env=es_env(path))
    try:
        c = EsCounter()
        app.save(c)  # warm-up: creation
        t0 = perf()
        for _ in range(n):
            c.increment(by=1)
            app.save(c)
        dt = perf() - t0
        check(app.repository.get(c.id).value == n, "eventsourcing seq value")
    finally:
        app.close()
    return n / dt


def _raw_seq(path: Path, n: int) -> float:
    con = raw_connect(path)
    con.execute(RAW_INSERT, ("seq-0", 0, "Created", RAW_DATA))  # warm-up
    t0 = perf()
    for v in range(1, n + 1):
        con.execute("BEGIN")
        con.execute(RAW_INSERT, ("seq-0", v, "Incremented", json.dumps({"by": 1})))
        con.execute("COMMIT")
    dt = perf() - t0
    check(raw_count(con) == n + 1, "raw seq count")
    con.close()
    return n / dt


# -- 2. per-command append, 64 concurrent coroutines --------------------------------------------


async def _rv_conc(
    path: Where, workers: int, per: int, synchronous: str = "FULL", ids: bool = False
) -> float:
    """``workers`` concurrent streams of ``per`` commands; ``ids``: each with a fresh
    command id."""
    app = rv_app(path, synchronous=synchronous)
    log = app.event_log(Counter)

    async def worker(i: int) -> None:
        for k in range(per):
            cid = f"cmd-{i}-{k}" if ids else None
            await log.execute(f"conc-{i}", Increment(by=1), command_id=cid)

    async with app:
        await asyncio.gather(*(log.execute(f"conc-{i}", Increment(by=1)) for i in range(workers)))
        t0 = perf()
        await asyncio.gather(*(worker(i) for i in range(workers)))
        dt = perf() - t0
        check(await rv_count(app) == workers * (per + 1), "reventless conc count")
    return workers * per / dt


# -- 3. ten events per transaction --------------------------------------------------------------


async def _rv_batch(path: Where, n_tx: int) -> float:
    app = rv_app(path)
    log = app.event_log(Counter)
    async with app:
        await log.append("batch-0", [Incremented(by=1)], expected_version=0)  # warm-up
        version = 1
        t0 = perf()
        for _ in range(n_tx):
            events = [Incremented(by=1) for _ in range(10)]
            await log.append("batch-0", events, expected_version=version)
            version += 10
        dt = perf() - t0
        check(await rv_count(app) == n_tx * 10 + 1, "reventless batch count")
    return n_tx * 10 / dt


def _es_batch(path: Where, n_tx: int) -> float:
    app = EsApp(env=es_env(path))
    try:
        c = EsCounter()
        app.save(c)
        t0 = perf()
        for _ in range(n_tx):
            for _ in range(10):
                c.increment(by=1)
            app.save(c)
        dt = perf() - t0
        check(app.repository.get(c.id).value == n_tx * 10, "eventsourcing batch value")
    finally:
        app.close()
    return n_tx * 10 / dt


def _raw_batch(path: Path, n_tx: int) -> float:
    con = raw_connect(path)
    con.execute(RAW_INSERT, ("batch-0", 0, "Created", RAW_DATA))
    version = 0
    t0 = perf()
    for _ in range(n_tx):
        rows = [
            ("batch-0", version + i + 1, "Incremented", json.dumps({"by": 1})) for i in range(10)
        ]
        con.execute("BEGIN")
        con.executemany(RAW_INSERT, rows)
        con.execute("COMMIT")
        version += 10
    dt = perf() - t0
    check(raw_count(con) == n_tx * 10 + 1, "raw batch count")
    con.close()
    return n_tx * 10 / dt


# -- 4. bulk append ------------------------------------------------------------------------------


async def _rv_bulk_concurrent(path: Where, aggs: int, per: int) -> float:
    app = rv_app(path)
    log = app.event_log(Counter)
    events = [Incremented(by=1) for _ in range(per)]
    async with app:
        t0 = perf()
        await asyncio.gather(
            *(log.append(f"bulk-{i}", events, expected_version=0) for i in range(aggs))
        )
        dt = perf() - t0
        check(await rv_count(app) == aggs * per, "reventless bulk count")
    return aggs * per / dt


async def _rv_bulk_calls(path: Where, total: int, per_call: int) -> float:
    app = rv_app(path)
    log = app.event_log(Counter)
    events = [Incremented(by=1) for _ in range(per_call)]
    calls = total // per_call
    async with app:
        t0 = perf()
        for i in range(calls):
            await log.append(f"big-{i}", events, expected_version=0)
        dt = perf() - t0
        check(await rv_count(app) == calls * per_call, "reventless big-call count")
    return calls * per_call / dt


def _es_bulk(path: Where, aggs: int, per: int) -> float:
    app = EsApp(env=es_env(path))
    try:
        counters = es_counters(aggs, per)  # each: Created + (per - 1) increments
        t0 = perf()
        app.save(*counters)
        dt = perf() - t0
        check(app.recorder.max_notification_id() == aggs * per, "eventsourcing bulk count")
    finally:
        app.close()
    return aggs * per / dt


def _raw_bulk(path: Path, aggs: int, per: int) -> float:
    con = raw_connect(path)
    t0 = perf()
    # Rows are built inside the timing, as in every other raw workload: encoding each
    # event (here json.dumps) is work any application pays per event.
    rows = [
        (f"bulk-{i}", v, "Incremented", json.dumps({"by": 1}))
        for i in range(aggs)
        for v in range(1, per + 1)
    ]
    con.execute("BEGIN")
    con.executemany(RAW_INSERT, rows)
    con.execute("COMMIT")
    dt = perf() - t0
    check(raw_count(con) == aggs * per, "raw bulk count")
    con.close()
    return aggs * per / dt


# -- 5. load a long aggregate ------------------------------------------------------------------


async def _rv_load(path: Where, n_events: int, repeats: int, snapshot_every: int) -> float:
    app = rv_app(path, snapshot_every)
    log = app.event_log(Counter)
    async with app:
        if snapshot_every:
            # Snapshots are written by execute(): append n-1, then one command crosses
            # the snapshot boundary and stores the state at version n.
            await log.append("load-0", [Incremented(by=1)] * (n_events - 1), expected_version=0)
            await log.execute("load-0", Increment(by=1))
            snap, tail = await app.store.load(log.name, "load-0")
            check(snap is not None and snap[0] == n_events and not tail, "reventless snapshot")
        else:
            await log.append("load-0", [Incremented(by=1)] * n_events, expected_version=0)
        log.forget()
        await log.load("load-0")  # warm-up (statement caches, page cache)
        t0 = perf()
        for _ in range(repeats):
            log.forget()
            agg = await log.load("load-0")
        dt = perf() - t0
        check(agg.value == n_events and agg.version == n_events, "reventless load value")
    return repeats / dt


def _es_load(path: Where, n_events: int, repeats: int, snapshots: bool) -> float:
    app = (EsSnapApp if snapshots else EsApp)(env=es_env(path))
    try:
        c = EsCounter()  # version 1: Created
        for _ in range(n_events - 1):
            c.increment(by=1)
        app.save(c)  # EsSnapApp snapshots every 100 versions, so also at version n
        app.repository.get(c.id)  # warm-up
        t0 = perf()
        for _ in range(repeats):
            agg = app.repository.get(c.id)
        dt = perf() - t0
        check(agg.version == n_events and agg.value == n_events - 1, "eventsourcing load")
    finally:
        app.close()
    return repeats / dt


def _raw_load(path: Path, n_events: int, repeats: int, snapshots: bool) -> float:
    con = raw_connect(path)
    con.execute(
        "CREATE TABLE snapshots (aggregate_id TEXT PRIMARY KEY, version INTEGER, state TEXT)"
    )
    con.execute("BEGIN")
    con.executemany(
        RAW_INSERT, [("load-0", v, "Incremented", RAW_DATA) for v in range(1, n_events + 1)]
    )
    if snapshots:
        con.execute(
            "INSERT INTO snapshots VALUES (?, ?, ?)",
            ("load-0", n_events, json.dumps({"value": n_events})),
        )
    con.execute("COMMIT")

    def load() -> int:
        value, after = 0, 0
        snap = con.execute(
            "SELECT version, state FROM snapshots WHERE aggregate_id = ?", ("load-0",)
        ).fetchone()
        if snap is not None:
            after, value = snap[0], json.loads(snap[1])["value"]
        for (data,) in con.execute(
            "SELECT data FROM events WHERE aggregate_id = ? AND version > ? ORDER BY version",
            ("load-0", after),
        ):
            value += json.loads(data)["by"]
        return value

    load()
    t0 = perf()
    for _ in range(repeats):
        value = load()
    dt = perf() - t0
    check(value == n_events, "raw load value")
    con.close()
    return repeats / dt


# -- 6. collector catch-up into an SQL read model ----------------------------------------------


async def _rv_catchup(path: Where, aggs: int, per: int, view: str = "handler") -> float:
    """Catch-up of a fresh read model over the preloaded log (``VIEWS``): ``handler`` (a
    pydantic row upserted per event) or ``fold`` (the same view as ``rv.ColumnUpserts``)."""
    pre = rv_app(path)
    log = pre.event_log(Counter)
    async with pre:
        await rv_preload(log, "cu", aggs, per)
    app = rv_app(path)
    app.event_log(Counter)
    handle = app.collect(VIEWS[view])
    t0 = perf()
    await app.start()
    try:
        await app.settle(timeout=600)
        dt = perf() - t0
        rows = await handle.all()
        check(
            len(rows) == aggs and sum(r.events for r in rows) == aggs * per,
            f"reventless catch-up rows ({view})",
        )
    finally:
        await app.stop()
    return aggs * per / dt


def _es_catchup(path: Path, aggs: int, per: int) -> float:
    app = EsApp(env=es_env(path))
    app.save(*es_counters(aggs, per))
    app.close()

    t0 = perf()
    app = EsApp(env=es_env(path))
    factory = InfrastructureFactory.construct(Environment(TotalsProjection.name, es_env(path)))
    view = factory.tracking_recorder(SQLiteTotalsRecorder)
    projection = TotalsProjection(view=view)
    try:
        # What ApplicationSubscription + ProjectionRunner do, without the subscription
        # (the SQLite recorder has none): pull notifications in order, convert, process.
        position = view.max_tracking_id(app.name) or 0
        while True:
            notes = app.recorder.select_notifications(
                start=position, limit=500, inclusive_of_start=False
            )
            if not notes:
                break
            for n in notes:
                projection.process_event(app.mapper.to_domain_event(n), Tracking(app.name, n.id))
            position = notes[-1].id
        dt = perf() - t0
        rows = view.rows()
        check(
            len(rows) == aggs and sum(r[2] for r in rows) == aggs * (per - 1),
            "eventsourcing catch-up rows",
        )
        check(view.max_tracking_id(app.name) == aggs * per, "eventsourcing tracking")
    finally:
        app.close()
        factory.close()
    return aggs * per / dt


def _raw_catchup(path: Path, aggs: int, per: int, page: int = 2000) -> float:
    con = raw_connect(path)
    con.execute("BEGIN")
    con.executemany(
        RAW_INSERT,
        [(f"cu-{i}", v, "Incremented", RAW_DATA) for i in range(aggs) for v in range(1, per + 1)],
    )
    con.execute("COMMIT")
    con.close()

    t0 = perf()
    con = raw_connect(path)
    con.execute(
        "CREATE TABLE IF NOT EXISTS totals "
        "(id TEXT PRIMARY KEY, value INTEGER NOT NULL, events INTEGER NOT NULL)"
    )
    con.execute(
        "CREATE TABLE IF NOT EXISTS checkpoints (name TEXT PRIMARY KEY, position INTEGER NOT NULL)"
    )
    got = con.execute("SELECT position FROM checkpoints WHERE name = 'totals'").fetchone()
    position = got[0] if got else 0
    while True:
        rows = con.execute(
            'SELECT "offset", aggregate_id, data FROM events WHERE "offset" > ? '
            'ORDER BY "offset" LIMIT ?',
            (position, page),
        ).fetchall()
        if not rows:
            break
        keys = list({r[1] for r in rows})
        con.execute("BEGIN IMMEDIATE")
        current = {
            k: (v, e)
            for k, v, e in con.execute(
                f"SELECT id, value, events FROM totals WHERE id IN ({','.join('?' * len(keys))})",
                keys,
            )
        }
        for _, agg, data in rows:
            v, e = current.get(agg, (0, 0))
            current[agg] = (v + json.loads(data)["by"], e + 1)
        con.executemany(
            "INSERT INTO totals VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET value = excluded.value, events = excluded.events",
            [(k, v, e) for k, (v, e) in current.items()],
        )
        position = rows[-1][0]
        con.execute(
            "INSERT INTO checkpoints VALUES ('totals', ?) "
            "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
            (position,),
        )
        con.execute("COMMIT")
    dt = perf() - t0
    n_rows, n_events = con.execute("SELECT COUNT(*), SUM(events) FROM totals").fetchone()
    check(n_rows == aggs and n_events == aggs * per, "raw catch-up rows")
    con.close()
    return aggs * per / dt


# -- probes (run once, reported in BENCHMARKS.md) ---------------------------------------------


async def _rv_pragmas(path: Path) -> tuple[str, str]:
    app = rv_app(path)
    app.event_log(Counter)
    async with app:
        got = await app.store.db.write(
            lambda c: (
                c.exec_driver_sql("PRAGMA journal_mode").scalar(),
                c.exec_driver_sql("PRAGMA synchronous").scalar(),
            )
        )
    return str(got[0]), str(got[1])


def durability(path: Path) -> dict[str, tuple[str, str]]:
    """(journal_mode, synchronous) as seen on each contender's own write connection."""
    out: dict[str, tuple[str, str]] = {}
    (path / "rv").mkdir()
    out["reventless"] = asyncio.run(_rv_pragmas(path / "rv"))
    (path / "es").mkdir()
    app = EsApp(env=es_env(path / "es"))
    try:
        pool = app.factory.datastore.pool  # type: ignore[attr-defined]
        conn = pool.get_connection(is_writer=True)
        try:
            raw = conn._sqlite_conn
            out["eventsourcing"] = (
                str(raw.execute("PRAGMA journal_mode").fetchone()[0]),
                str(raw.execute("PRAGMA synchronous").fetchone()[0]),
            )
        finally:
            pool.put_connection(conn)
    finally:
        app.close()
    (path / "raw").mkdir()
    con = raw_connect(path / "raw")
    out["raw"] = (
        str(con.execute("PRAGMA journal_mode").fetchone()[0]),
        str(con.execute("PRAGMA synchronous").fetchone()[0]),
    )
    con.close()
    return out


def probe_projection_runner(path: Path) -> str:
    """Try eventsourcing's documented ProjectionRunner on SQLite; describe the outcome."""
    try:
        runner = ProjectionRunner(
            application_class=EsApp,
            projection_class=TotalsProjection,
            view_class=SQLiteTotalsRecorder,
            env=es_env(path),
        )
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    runner.stop()
    return "ok"


# -- the table of workloads -----------------------------------------------------------------------


def build(s: Sizes) -> list[Workload]:
    bulk_total = s.bulk_aggs * s.bulk_per_agg
    cu_rv = s.catchup_aggs * s.catchup_per_agg
    cu_es = s.catchup_aggs_es * s.catchup_per_agg
    return [
        Workload(
            "seq_append",
            "per-command append, 1 event/tx, sequential",
            "cmd/s",
            {
                "reventless": lambda p: run_async(_rv_seq, p, s.seq_commands),
                "eventsourcing": lambda p: _es_seq(p, s.seq_commands),
                "raw": lambda p: _raw_seq(p, s.seq_commands),
            },
            {
                "reventless": f"for _ in range({s.seq_commands}): "
                "await log.execute('seq-0', Increment(by=1))",
                "eventsourcing": f"for _ in range({s.seq_commands}): "
                "c.increment(by=1); app.save(c)",
                "raw": f"for v in range(1, {s.seq_commands + 1}): BEGIN; "
                "INSERT INTO events VALUES (...)  -- 1 row; COMMIT",
            },
        ),
        Workload(
            "conc_append",
            f"per-command append, {s.conc_workers} concurrent commands (group commit)",
            "cmd/s",
            {"reventless": lambda p: run_async(_rv_conc, p, s.conc_workers, s.conc_per_worker)},
            {
                "reventless": f"asyncio.gather(*({s.conc_per_worker} x await log.execute("
                f"f'conc-{{i}}', Increment(by=1)) for i in range({s.conc_workers})))",
                "eventsourcing": "(no async API: its number from seq_append)",
                "raw": "(its sequential single-row insert+commit number from seq_append)",
            },
            peer_from="seq_append",
        ),
        Workload(
            "batch10",
            "10 events per transaction, sequential",
            "events/s",
            {
                "reventless": lambda p: run_async(_rv_batch, p, s.batch_tx),
                "eventsourcing": lambda p: _es_batch(p, s.batch_tx),
                "raw": lambda p: _raw_batch(p, s.batch_tx),
            },
            {
                "reventless": f"for _ in range({s.batch_tx}): await log.append('batch-0', "
                "[Incremented(by=1) for _ in range(10)], expected_version=v)",
                "eventsourcing": f"for _ in range({s.batch_tx}): "
                "10 x c.increment(by=1); app.save(c)",
                "raw": f"for _ in range({s.batch_tx}): BEGIN; executemany(INSERT, 10 rows); COMMIT",
            },
        ),
        Workload(
            "bulk_concurrent",
            f"bulk append {bulk_total:,} events: {s.bulk_aggs} concurrent appends "
            f"x {s.bulk_per_agg}",
            "events/s",
            {
                "reventless": lambda p: run_async(
                    _rv_bulk_concurrent, p, s.bulk_aggs, s.bulk_per_agg
                ),
                "eventsourcing": lambda p: _es_bulk(p, s.bulk_aggs, s.bulk_per_agg),
                "raw": lambda p: _raw_bulk(p, s.bulk_aggs, s.bulk_per_agg),
            },
            {
                "reventless": f"asyncio.gather(*(log.append(f'bulk-{{i}}', events_{s.bulk_per_agg}"
                f", expected_version=0) for i in range({s.bulk_aggs})))",
                "eventsourcing": f"app.save(*counters)  # {s.bulk_aggs} aggregates with "
                f"{s.bulk_per_agg} pending events each, one transaction",
                "raw": f"build {bulk_total:,} rows (json.dumps each); "
                "BEGIN; executemany(INSERT); COMMIT",
            },
        ),
        Workload(
            "bulk_calls",
            f"bulk append {bulk_total:,} events: sequential appends of {s.bulk_big_call:,}",
            "events/s",
            {"reventless": lambda p: run_async(_rv_bulk_calls, p, bulk_total, s.bulk_big_call)},
            {
                "reventless": f"for i in range({bulk_total // s.bulk_big_call}): await "
                f"log.append(f'big-{{i}}', events_{s.bulk_big_call}, expected_version=0)",
                "eventsourcing": "(its number from bulk_concurrent)",
                "raw": "(its number from bulk_concurrent)",
            },
            peer_from="bulk_concurrent",
        ),
        Workload(
            "load",
            f"load a {s.load_events}-event aggregate, no snapshot",
            "loads/s",
            {
                "reventless": lambda p: run_async(_rv_load, p, s.load_events, s.load_repeats, 0),
                "eventsourcing": lambda p: _es_load(p, s.load_events, s.load_repeats, False),
                "raw": lambda p: _raw_load(p, s.load_events, s.load_repeats, False),
            },
            {
                "reventless": f"for _ in range({s.load_repeats}): log.forget(); "
                "await log.load('load-0')  # LogOptions(snapshot_every=0)",
                "eventsourcing": f"for _ in range({s.load_repeats}): app.repository.get(c.id)",
                "raw": "SELECT data FROM events WHERE aggregate_id=? ORDER BY version; "
                "sum(json.loads(d)['by'])",
            },
            latency=True,
        ),
        Workload(
            "load_snap",
            f"load a {s.load_events}-event aggregate, snapshot every 100",
            "loads/s",
            {
                "reventless": lambda p: run_async(_rv_load, p, s.load_events, s.load_repeats, 100),
                "eventsourcing": lambda p: _es_load(p, s.load_events, s.load_repeats, True),
                "raw": lambda p: _raw_load(p, s.load_events, s.load_repeats, True),
            },
            {
                "reventless": f"for _ in range({s.load_repeats}): log.forget(); "
                "await log.load('load-0')  # LogOptions(snapshot_every=100)",
                "eventsourcing": f"for _ in range({s.load_repeats}): app.repository.get(c.id)"
                "  # snapshotting_intervals = {EsCounter: 100}",
                "raw": "SELECT snapshot row; SELECT events after its version; fold",
            },
            latency=True,
        ),
        Workload(
            "catchup",
            "collector catch-up into an SQL read model (durable checkpoint)",
            "events/s",
            {
                "reventless": lambda p: run_async(
                    _rv_catchup, p, s.catchup_aggs, s.catchup_per_agg
                ),
                "eventsourcing": lambda p: _es_catchup(p, s.catchup_aggs_es, s.catchup_per_agg),
                "raw": lambda p: _raw_catchup(p, s.catchup_aggs, s.catchup_per_agg),
            },
            {
                "reventless": f"{cu_rv:,} events preloaded; fresh App: app.collect(totals); "
                "await app.start(); await app.settle()",
                "eventsourcing": f"{cu_es:,} events preloaded; TotalsProjection.process_event("
                "mapper.to_domain_event(n), Tracking(...)) for each notification "
                "(pages of 500): one transaction per event",
                "raw": f"{cu_rv:,} events preloaded; per page of 2000: SELECT page; BEGIN "
                "IMMEDIATE; SELECT the page's current totals; upsert totals + checkpoint; COMMIT",
            },
            sizes={
                "reventless": f"{cu_rv:,} events",
                "eventsourcing": f"{cu_es:,} events",
                "raw": f"{cu_rv:,} events",
            },
        ),
    ]
