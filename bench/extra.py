"""More workloads, on SQLite and PostgreSQL alike: read the whole log decoded, the
throughput of appends by events per transaction (the plot's sweep), and the latency
from a command to its read-model row at a steady rate.

Each function takes a fresh SQLite directory or ``PgDb`` (like ``workloads.py``) and
returns operations per second; ``_rv_latency`` returns commands per second achieved and
records p50/p99 in ``LATENCIES``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import statistics
from typing import Any

import psycopg

from .pgserver import PgDb
from .specs import Counter, EsApp, EsCounter, Increment, Incremented, totals
from .workloads import (
    RAW_INSERT,
    Sizes,
    Where,
    Workload,
    check,
    es_counters,
    es_env,
    perf,
    raw_connect,
    raw_count,
    run_async,
    rv_app,
    rv_count,
    rv_preload,
)

#: Events per transaction of the sweep (1 is the per-command row, ``seq_append``).
SWEEP = (10, 100, 1000)

#: (store, reps) -> [(p50 ms, p99 ms)] of each latency run, for the report.
LATENCIES: dict[str, list[tuple[float, float]]] = {}


def _pg_raw(db: PgDb) -> psycopg.Connection[Any]:
    from . import pg

    return pg.raw_connect(db)


_READ = 'SELECT "offset", data FROM events WHERE "offset" > ? ORDER BY "offset" LIMIT 1000'
_PG_INSERT = "INSERT INTO events (aggregate_id, version, type, data) VALUES (%s, %s, %s, %s)"


# -- read the whole log, decoded ---------------------------------------------------------------


async def _rv_read(where: Where, aggs: int, per: int) -> float:
    app = rv_app(where)
    log = app.event_log(Counter)
    async with app:
        await rv_preload(log, "rd", aggs, per)
        t0 = perf()
        total = n = 0
        async for ev in log.iter():
            total += ev.event.by
            n += 1
        dt = perf() - t0
    check(n == total == aggs * per, "reventless read count")
    return n / dt


def _es_read(where: Where, aggs: int, per: int) -> float:
    app = EsApp(env=es_env(where))
    try:
        counters = es_counters(aggs, per)
        for i in range(0, aggs, 10):  # psycopg 3.3 hangs on one huge pipelined save
            app.save(*counters[i : i + 10])
        t0 = perf()
        n, position = 0, 0
        while True:
            notes = app.recorder.select_notifications(
                start=position, limit=1000, inclusive_of_start=False
            )
            if not notes:
                break
            for note in notes:
                app.mapper.to_domain_event(note)
            n += len(notes)
            position = notes[-1].id
        dt = perf() - t0
    finally:
        app.close()
    check(n == aggs * per, "eventsourcing read count")
    return n / dt


def _raw_read(where: Where, aggs: int, per: int) -> float:
    data = json.dumps({"by": 1})
    rows = [(f"rd-{i}", v, "Incremented", data) for i in range(aggs) for v in range(1, per + 1)]
    if isinstance(where, PgDb):
        con: Any = _pg_raw(where)
        with con.transaction(), con.cursor() as cur:
            cur.executemany(_PG_INSERT, rows)
        select = (
            'SELECT "offset", data FROM events WHERE "offset" > %s ORDER BY "offset" LIMIT 1000'
        )
    else:
        con = raw_connect(where)
        con.execute("BEGIN")
        con.executemany(RAW_INSERT, rows)
        con.execute("COMMIT")
        select = _READ
    t0 = perf()
    n = total = last = 0
    while True:
        page = con.execute(select, (last,)).fetchall()
        if not page:
            break
        for _, data in page:
            total += json.loads(data)["by"]
        n += len(page)
        last = page[-1][0]
    dt = perf() - t0
    con.close()
    check(n == total == aggs * per, "raw read count")
    return n / dt


# -- events per transaction (the sweep) --------------------------------------------------------


async def _rv_per_tx(where: Where, n_tx: int, per: int) -> float:
    app = rv_app(where)
    log = app.event_log(Counter)
    async with app:
        await log.append("tx-0", [Incremented(by=1)], expected_version=0)  # warm-up
        version = 1
        t0 = perf()
        for _ in range(n_tx):
            events = [Incremented(by=1) for _ in range(per)]
            await log.append("tx-0", events, expected_version=version)
            version += per
        dt = perf() - t0
        check(await rv_count(app) == n_tx * per + 1, "reventless per-tx count")
    return n_tx * per / dt


def _es_per_tx(where: Where, n_tx: int, per: int) -> float:
    app = EsApp(env=es_env(where))
    try:
        c = EsCounter()
        app.save(c)
        t0 = perf()
        for _ in range(n_tx):
            for _ in range(per):
                c.increment(by=1)
            app.save(c)
        dt = perf() - t0
        check(app.repository.get(c.id).value == n_tx * per, "eventsourcing per-tx value")
    finally:
        app.close()
    return n_tx * per / dt


def _raw_per_tx(where: Where, n_tx: int, per: int) -> float:
    pg = isinstance(where, PgDb)
    con: Any = _pg_raw(where) if pg else raw_connect(where)  # type: ignore[arg-type]
    insert = _PG_INSERT if pg else RAW_INSERT
    version = 0
    t0 = perf()
    for _ in range(n_tx):
        rows = [("tx-0", version + i + 1, "Incremented", json.dumps({"by": 1})) for i in range(per)]
        if pg:
            with con.transaction(), con.cursor() as cur:
                cur.executemany(insert, rows)
        else:
            con.execute("BEGIN")
            con.executemany(insert, rows)
            con.execute("COMMIT")
        version += per
    dt = perf() - t0
    if pg:
        from . import pg as pgmod

        count = pgmod.raw_count(con)
    else:
        assert isinstance(con, sqlite3.Connection)
        count = raw_count(con)
    check(count == n_tx * per, "raw per-tx count")
    con.close()
    return n_tx * per / dt


# -- command -> read model latency at a steady rate --------------------------------------------


async def _rv_latency(where: Where, rate: int, seconds: float, key: str) -> float:
    """``execute`` at ``rate`` commands/s over 50 aggregates; each command's latency is
    until the read model's collector has committed its event (checkpoint + row)."""
    app = rv_app(where)
    log = app.event_log(Counter)
    app.collect(totals)
    sent: dict[tuple[str, int], float] = {}
    seen: dict[tuple[str, int], float] = {}
    async with app:
        collector = app.collector("counter_totals")
        process = collector.process

        async def timed(topic: str, partition: int, envs: list[Any], checkpoint: int) -> None:
            await process(topic, partition, envs, checkpoint)
            now = perf()
            for ev in envs:
                seen[(ev.aggregate_id, ev.version)] = now

        collector.process = timed  # type: ignore[method-assign]
        n = int(rate * seconds)
        start = perf()
        tasks = []
        for i in range(n):
            await asyncio.sleep(max(0.0, start + i / rate - perf()))
            agg = f"lat-{i % 50}"

            async def one(agg: str = agg) -> None:
                t = perf()
                res = await log.execute(agg, Increment(by=1))
                sent[(agg, res.version)] = t

            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        achieved = n / (perf() - start)
        await app.settle(timeout=60)
    lat = sorted((seen[k] - t) * 1000 for k, t in sent.items())
    check(len(lat) == n, "reventless latency: every command reached the read model")
    LATENCIES.setdefault(key, []).append((statistics.median(lat), lat[int(len(lat) * 0.99) - 1]))
    return achieved


# -- the table -------------------------------------------------------------------------------


def build(s: Sizes, store: str) -> list[Workload]:
    """The extra rows for ``store`` (sizes from ``s``: PostgreSQL commits cost more)."""
    read_aggs, read_per = (10, 1000) if s.seq_commands < 1000 else (100, 1000)
    n_read = read_aggs * read_per
    out = [
        Workload(
            "read_all",
            f"read the whole log, decoded ({n_read:,} events)",
            "events/s",
            {
                "reventless": lambda p: run_async(_rv_read, p, read_aggs, read_per),
                "eventsourcing": lambda p: _es_read(p, read_aggs, read_per),
                "raw": lambda p: _raw_read(p, read_aggs, read_per),
            },
            {
                "reventless": "async for ev in log.iter(): total += ev.event.by",
                "eventsourcing": "app.recorder.select_notifications(start, limit=1000, "
                "inclusive_of_start=False); app.mapper.to_domain_event(n) for each",
                "raw": 'SELECT "offset", data ... LIMIT 1000 (keyset pages); '
                "json.loads(data)['by'] for each",
            },
            store=store,
        )
    ]
    for per in SWEEP:
        n_tx = max(3, (s.batch_tx * 10) // per)
        if per == 10:
            continue  # the batch10 row
        out.append(
            Workload(
                f"batch{per}",
                f"{per} events per transaction, sequential",
                "events/s",
                {
                    "reventless": lambda p, n=n_tx, k=per: run_async(_rv_per_tx, p, n, k),
                    "eventsourcing": lambda p, n=n_tx, k=per: _es_per_tx(p, n, k),
                    "raw": lambda p, n=n_tx, k=per: _raw_per_tx(p, n, k),
                },
                {
                    "reventless": f"for _ in range({n_tx}): await log.append('tx-0', "
                    f"[Incremented(by=1) for _ in range({per})], v)",
                    "eventsourcing": f"for _ in range({n_tx}): {per} x c.increment(by=1); "
                    "app.save(c)",
                    "raw": f"for _ in range({n_tx}): BEGIN; executemany(INSERT, {per} rows); "
                    "COMMIT",
                },
                store=store,
            )
        )
    rate, seconds = (200, 1.0) if s.seq_commands < 1000 else (500, 10.0)
    out.append(
        Workload(
            "latency",
            f"command -> read-model row at a steady {rate} commands/s (achieved rate; "
            "p50/p99 below)",
            "cmd/s",
            {
                "reventless": lambda p: run_async(_rv_latency, p, rate, seconds, store),
            },
            {
                "reventless": f"{int(rate * seconds):,} x log.execute(f'lat-{{i % 50}}', "
                f"Increment(by=1)) at {rate}/s; latency until the read model's transaction "
                "(rows + checkpoint) with that event committed",
                "eventsourcing": "(not measured: its ProjectionRunner polls; no comparable "
                "push path)",
                "raw": "(no framework: not applicable)",
            },
            store=store,
        )
    )
    return out
