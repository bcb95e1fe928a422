"""The workloads on PostgreSQL (``--store postgres``): one fresh database per measurement.

reventless and eventsourcing run the same functions as on SQLite (``workloads.py``),
given a ``PgDb`` instead of a directory: reventless on its
``postgresql+psycopg://`` URL, eventsourcing on ``eventsourcing.postgres``. The raw
contender is psycopg 3 on the same 4-column row shape as raw ``sqlite3``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

import psycopg
from eventsourcing.projection import ProjectionRunner

from .pgserver import PgDb
from .specs import Counter, EsApp, PostgresTotalsRecorder, TotalsProjection
from .workloads import (
    RAW_DATA,
    Runner,
    Sizes,
    Workload,
    _es_bulk,
    _rv_bulk_calls,
    _rv_bulk_concurrent,
    _rv_catchup,
    check,
    es_counters,
    es_env,
    perf,
    run_async,
    rv_app,
)
from .workloads import build as sqlite_build

Conn = psycopg.Connection[Any]

RAW_COLUMNS = "aggregate_id, version, type, data"
RAW_INSERT = f"INSERT INTO events ({RAW_COLUMNS}) VALUES (%s, %s, %s, %s)"
RAW_COPY_TEXT = f"COPY events ({RAW_COLUMNS}) FROM STDIN"
RAW_COPY_BINARY = f"COPY events ({RAW_COLUMNS}) FROM STDIN (FORMAT BINARY)"
RAW_TYPES = ["text", "int8", "text", "text"]


def raw_connect(db: PgDb) -> Conn:
    """Autocommit connection (transactions are explicit) with the raw events table."""
    con = db.connect()
    con.execute(
        'CREATE TABLE IF NOT EXISTS events ("offset" bigint GENERATED ALWAYS AS IDENTITY '
        "PRIMARY KEY, aggregate_id text NOT NULL, version bigint NOT NULL, type text NOT NULL, "
        "data text NOT NULL, UNIQUE (aggregate_id, version))"
    )
    return con


def raw_count(con: Conn) -> int:
    return int(con.execute("SELECT COUNT(*) FROM events").fetchone()[0])  # type: ignore[index]


# -- raw psycopg ----------------------------------------------------------------------------


def _raw_seq(db: PgDb, n: int) -> float:
    con = raw_connect(db)
    con.execute(RAW_INSERT, ("seq-0", 0, "Created", RAW_DATA))  # warm-up
    t0 = perf()
    for v in range(1, n + 1):
        with con.transaction():  # BEGIN; INSERT; COMMIT
            con.execute(RAW_INSERT, ("seq-0", v, "Incremented", json.dumps({"by": 1})))
    dt = perf() - t0
    check(raw_count(con) == n + 1, "raw seq count")
    con.close()
    return n / dt


def _raw_batch(db: PgDb, n_tx: int) -> float:
    con = raw_connect(db)
    con.execute(RAW_INSERT, ("batch-0", 0, "Created", RAW_DATA))
    version = 0
    t0 = perf()
    with con.cursor() as cur:
        for _ in range(n_tx):
            rows = [
                ("batch-0", version + i + 1, "Incremented", json.dumps({"by": 1}))
                for i in range(10)
            ]
            with con.transaction():
                cur.executemany(RAW_INSERT, rows)  # psycopg pipelines the 10 INSERTs
            version += 10
    dt = perf() - t0
    check(raw_count(con) == n_tx * 10 + 1, "raw batch count")
    con.close()
    return n_tx * 10 / dt


def _raw_copy(db: PgDb, aggs: int, per: int, binary: bool) -> float:
    con = raw_connect(db)
    t0 = perf()
    # Rows are built inside the timing, as in every other raw workload: encoding each
    # event (here json.dumps) is work any application pays per event.
    rows = [
        (f"bulk-{i}", v, "Incremented", json.dumps({"by": 1}))
        for i in range(aggs)
        for v in range(1, per + 1)
    ]
    sql = RAW_COPY_BINARY if binary else RAW_COPY_TEXT
    with con.transaction(), con.cursor() as cur, cur.copy(sql) as copy:
        if binary:
            copy.set_types(RAW_TYPES)
        for row in rows:
            copy.write_row(row)
    dt = perf() - t0
    check(raw_count(con) == aggs * per, "raw bulk count")
    con.close()
    return aggs * per / dt


def _raw_load(db: PgDb, n_events: int, repeats: int, snapshots: bool) -> float:
    con = raw_connect(db)
    con.execute(
        "CREATE TABLE snapshots (aggregate_id text PRIMARY KEY, version bigint, state text)"
    )
    with con.transaction(), con.cursor() as cur:
        cur.executemany(
            RAW_INSERT, [("load-0", v, "Incremented", RAW_DATA) for v in range(1, n_events + 1)]
        )
        if snapshots:
            cur.execute(
                "INSERT INTO snapshots VALUES (%s, %s, %s)",
                ("load-0", n_events, json.dumps({"value": n_events})),
            )

    def load() -> int:
        value, after = 0, 0
        snap = con.execute(
            "SELECT version, state FROM snapshots WHERE aggregate_id = %s", ("load-0",)
        ).fetchone()
        if snap is not None:
            after, value = snap[0], json.loads(snap[1])["value"]
        for (data,) in con.execute(
            "SELECT data FROM events WHERE aggregate_id = %s AND version > %s ORDER BY version",
            ("load-0", after),
        ):
            value += json.loads(data)["by"]
        return value

    for _ in range(6):  # warm-up; psycopg prepares statements from the 5th execution
        load()
    t0 = perf()
    for _ in range(repeats):
        value = load()
    dt = perf() - t0
    check(value == n_events, "raw load value")
    con.close()
    return repeats / dt


def _raw_catchup(db: PgDb, aggs: int, per: int, page: int = 2000) -> float:
    con = raw_connect(db)
    with con.transaction(), con.cursor() as cur, cur.copy(RAW_COPY_BINARY) as copy:
        copy.set_types(RAW_TYPES)
        for i in range(aggs):
            for v in range(1, per + 1):
                copy.write_row((f"cu-{i}", v, "Incremented", RAW_DATA))
    con.close()

    t0 = perf()
    con = raw_connect(db)
    con.execute(
        "CREATE TABLE IF NOT EXISTS totals "
        "(id text PRIMARY KEY, value bigint NOT NULL, events bigint NOT NULL)"
    )
    con.execute(
        "CREATE TABLE IF NOT EXISTS checkpoints (name text PRIMARY KEY, position bigint NOT NULL)"
    )
    got = con.execute("SELECT position FROM checkpoints WHERE name = 'totals'").fetchone()
    position = got[0] if got else 0
    with con.cursor() as cur:
        while True:
            rows = cur.execute(
                'SELECT "offset", aggregate_id, data FROM events WHERE "offset" > %s '
                'ORDER BY "offset" LIMIT %s',
                (position, page),
            ).fetchall()
            if not rows:
                break
            keys = list({r[1] for r in rows})
            with con.transaction():
                current = {
                    k: (v, e)
                    for k, v, e in cur.execute(
                        "SELECT id, value, events FROM totals WHERE id = ANY(%s)", (keys,)
                    ).fetchall()
                }
                for _, agg, data in rows:
                    v, e = current.get(agg, (0, 0))
                    current[agg] = (v + json.loads(data)["by"], e + 1)
                cur.executemany(
                    "INSERT INTO totals VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                    "SET value = excluded.value, events = excluded.events",
                    [(k, v, e) for k, (v, e) in current.items()],
                )
                position = rows[-1][0]
                cur.execute(
                    "INSERT INTO checkpoints VALUES ('totals', %s) "
                    "ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                    (position,),
                )
    dt = perf() - t0
    n_rows, n_events = con.execute("SELECT COUNT(*), SUM(events) FROM totals").fetchone()  # type: ignore[misc]
    check(n_rows == aggs and n_events == aggs * per, "raw catch-up rows")
    con.close()
    return aggs * per / dt


# -- eventsourcing: catch-up with its documented ProjectionRunner ---------------------------


def _es_catchup(db: PgDb, aggs: int, per: int, poll: float = 0.005) -> float:
    env = es_env(db)
    app = EsApp(env=env)
    app.save(*es_counters(aggs, per))
    last = app.recorder.max_notification_id()
    app.close()
    check(last == aggs * per, "eventsourcing catch-up preload")

    t0 = perf()
    runner = ProjectionRunner(
        application_class=EsApp,
        projection_class=TotalsProjection,
        view_class=PostgresTotalsRecorder,
        env=env,
    )
    view = runner.view
    try:
        with runner:
            # runner.wait() polls with a back-off of up to 0.8 s; poll every 5 ms instead.
            while (view.max_tracking_id(runner.app_name) or 0) < aggs * per:
                if runner.is_interrupted.is_set():
                    runner.run_forever(0)  # re-raises the processing thread's error
                    raise AssertionError("eventsourcing ProjectionRunner stopped early")
                time.sleep(poll)
            dt = perf() - t0
        rows = view.rows()
        check(
            len(rows) == aggs and sum(r[2] for r in rows) == aggs * (per - 1),
            "eventsourcing catch-up rows",
        )
    finally:
        view.datastore.close()
    return aggs * per / dt


# -- durability probe -------------------------------------------------------------------------

SESSION_SETTINGS = ("synchronous_commit", "fsync", "wal_sync_method")


async def _rv_settings(db: PgDb) -> tuple[str, ...]:
    app = rv_app(db)
    app.event_log(Counter)
    async with app:
        return await app.store.db.write(
            lambda c: tuple(str(c.exec_driver_sql(f"SHOW {s}").scalar()) for s in SESSION_SETTINGS)
        )


def durability(new_db: Any) -> dict[str, tuple[str, ...]]:
    """``SESSION_SETTINGS`` as seen on each contender's own (write) connection."""
    out: dict[str, tuple[str, ...]] = {}
    out["reventless"] = asyncio.run(_rv_settings(new_db("probe_rv")))
    app = EsApp(env=es_env(new_db("probe_es")))
    try:
        with app.factory.datastore.get_connection() as conn:  # type: ignore[attr-defined]
            out["eventsourcing"] = tuple(
                str(conn.execute(f"SHOW {s}").fetchone()[s]) for s in SESSION_SETTINGS
            )
    finally:
        app.close()
    con = raw_connect(new_db("probe_raw"))
    out["raw"] = tuple(str(con.execute(f"SHOW {s}").fetchone()[0]) for s in SESSION_SETTINGS)  # type: ignore[index]
    con.close()
    return out


# -- the table of workloads -----------------------------------------------------------------------


def build(s: Sizes) -> list[Workload]:
    bulk_total = s.bulk_aggs * s.bulk_per_agg
    es_aggs = s.bulk_aggs_es or s.bulk_aggs
    cu_rv = s.catchup_aggs * s.catchup_per_agg
    cu_es = s.catchup_aggs_es * s.catchup_per_agg
    copy_rows = f"build {bulk_total:,} rows (json.dumps each); BEGIN; "
    sqlite_rows = {w.key: w for w in sqlite_build(s)}

    def pg(key: str, raw: Runner | None = None, raw_timed: str | None = None) -> Workload:
        """The SQLite row of ``key`` with PostgreSQL's raw contender (same reventless and
        eventsourcing code: their store is chosen by the runner's argument)."""
        w = sqlite_rows[key]
        run = {**w.run, **({"raw": raw} if raw else {})}
        timed = {**w.timed, **({"raw": raw_timed} if raw_timed else {})}
        return replace(w, run=run, timed=timed, store="postgres")

    return [
        pg(
            "seq_append",
            lambda p: _raw_seq(p, s.seq_commands),
            f"for v in range(1, {s.seq_commands + 1}): with conn.transaction(): "
            "conn.execute(INSERT ...)  -- BEGIN; 1 row; COMMIT",
        ),
        pg("conc_append"),
        pg(
            "batch10",
            lambda p: _raw_batch(p, s.batch_tx),
            f"for _ in range({s.batch_tx}): with conn.transaction(): "
            "cur.executemany(INSERT, 10 rows)  -- pipelined",
        ),
        Workload(
            "bulk_concurrent",
            f"bulk append {bulk_total:,} events: {s.bulk_aggs} concurrent appends "
            f"x {s.bulk_per_agg} (raw: COPY binary)",
            "events/s",
            {
                "reventless": lambda p: run_async(
                    _rv_bulk_concurrent, p, s.bulk_aggs, s.bulk_per_agg
                ),
                "eventsourcing": lambda p: _es_bulk(p, es_aggs, s.bulk_per_agg),
                "raw": lambda p: _raw_copy(p, s.bulk_aggs, s.bulk_per_agg, binary=True),
            },
            {
                "reventless": f"asyncio.gather(*(log.append(f'bulk-{{i}}', events_{s.bulk_per_agg}"
                f", expected_version=0) for i in range({s.bulk_aggs})))",
                "eventsourcing": f"app.save(*counters)  # {es_aggs} aggregates with "
                f"{s.bulk_per_agg} pending events each, one transaction",
                "raw": copy_rows + "COPY events (...) FROM STDIN (FORMAT BINARY): "
                "copy.write_row(row) for each; COMMIT",
            },
            sizes={
                "reventless": f"{bulk_total:,} events",
                "eventsourcing": f"{es_aggs * s.bulk_per_agg:,} events",
                "raw": f"{bulk_total:,} events",
            },
            store="postgres",
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
                "raw": "(its COPY binary number from bulk_concurrent)",
            },
            peer_from="bulk_concurrent",
            store="postgres",
        ),
        Workload(
            "bulk_copy_text",
            f"bulk append {bulk_total:,} events: raw COPY text format (reference)",
            "events/s",
            {"raw": lambda p: _raw_copy(p, s.bulk_aggs, s.bulk_per_agg, binary=False)},
            {
                "reventless": "(its number from bulk_concurrent)",
                "eventsourcing": "(its number from bulk_concurrent)",
                "raw": copy_rows + "COPY events (...) FROM STDIN: "
                "copy.write_row(row) for each; COMMIT",
            },
            borrow={"reventless": "bulk_concurrent", "eventsourcing": "bulk_concurrent"},
            store="postgres",
        ),
        pg(
            "load",
            lambda p: _raw_load(p, s.load_events, s.load_repeats, False),
            "SELECT data FROM events WHERE aggregate_id=%s ORDER BY version; "
            "sum(json.loads(d)['by'])",
        ),
        pg(
            "load_snap",
            lambda p: _raw_load(p, s.load_events, s.load_repeats, True),
            "SELECT snapshot row; SELECT events after its version; fold",
        ),
        Workload(
            "catchup",
            "collector catch-up into a PostgreSQL read model (durable checkpoint)",
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
                "eventsourcing": f"{cu_es:,} events preloaded; ProjectionRunner("
                "application_class=EsApp, projection_class=TotalsProjection, "
                "view_class=PostgresTotalsRecorder, env=...) until the view's tracking "
                "record reaches the last notification (polled every 5 ms): one transaction "
                "per event",
                "raw": f"{cu_rv:,} events preloaded; per page of 2000: SELECT page; BEGIN; "
                "SELECT the page's current totals (id = ANY(%s)); executemany(upsert totals) "
                "+ upsert checkpoint; COMMIT",
            },
            sizes={
                "reventless": f"{cu_rv:,} events",
                "eventsourcing": f"{cu_es:,} events",
                "raw": f"{cu_rv:,} events",
            },
            store="postgres",
        ),
    ]
