"""``python -m bench.command_split [--out FILE]``: where the CPU instructions of one
sequential command go, step by step, beside a raw one-row transaction.

A sequential command (``EventLog.execute`` of one event on a cached aggregate, a SQLite
file at ``synchronous=OFF``, the in-memory broker with no subscriber) is cut into the
steps below. Each step is its own workload, run ``small`` and ``large`` times in a fresh
interpreter under callgrind (as ``bench.instructions`` counts: the difference of the two
runs per operation, every thread of the process, ``PYTHONHASHSEED=0``), and each includes
the steps above it that it needs, so a step's own cost is the difference of two rows.
The relay's row also holds what its task does on its own clock (a look at the store each
second of wall time, which valgrind's slowdown spreads over more commands). The raw row is
``sqlite3`` alone: ``BEGIN IMMEDIATE``, one ``INSERT`` of the same columns
and values into a table of the same columns, ``COMMIT``.

Counts do not depend on the machine's load, but move by a few percent between runs with
when the garbage collector runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from .ab import ROOT
from .blocks import put_block
from .instructions import MODEL, count

#: (workload, what it runs per operation). Workloads after ``rows`` build the row first.
STEPS: list[tuple[str, str]] = [
    ("raw", "raw: `BEGIN IMMEDIATE`, one INSERT of the same 11 non-NULL values, `COMMIT`"),
    ("decide", "the command made and decided, its event applied to the state (no store)"),
    ("rows", "the event's stored row built (`EventLog._rows`: id, metadata, fields)"),
    ("txn", "rows + an empty `BEGIN IMMEDIATE`/`COMMIT` on the store's writer connection"),
    ("sql", "txn + the appender's INSERT of the row, bound by hand"),
    ("lone", "txn + the appender's lone append of the request (`Appender.one`)"),
    ("store", "rows + `store.append` of the request (the relay off: `publish=False`)"),
    ("relay", "rows + `store.append`, the relay on (nothing subscribed: passed over)"),
    ("execute", "the whole `execute` (the relay on)"),
]

#: Run in the working tree: ``python CHILD <workload> <operations> <dir>``.
CHILD = (
    MODEL
    + """
from functools import partial
from reventless.spec import Metadata
from reventless.store.append import AppendRequest


RAW_TABLE = (
    'CREATE TABLE e ("_offset" INTEGER PRIMARY KEY, _row_idx, _produced_at, _aggregate_id, '
    "_version, _type, _schema_version, _msg_id, _correlation_id, _causation_id, _user, "
    "_service, _ip, _tenant, _partition, _trace, by, UNIQUE(_aggregate_id, _version))"
)
RAW_INSERT = (
    "INSERT INTO e (_row_idx, _produced_at, _aggregate_id, _version, _type, _schema_version, "
    "_msg_id, _correlation_id, _service, _partition, by) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
)


def raw(n, where):
    import sqlite3

    con = sqlite3.connect(f"{where}/raw.db", isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(RAW_TABLE)
    for v in range(1, n + 1):
        uid = f"0190a3c2-7b1e-7c3d-9f00-{v:012x}"
        con.execute("BEGIN IMMEDIATE")
        values = (0, 1764650000000000 + v, "a", v, "Incremented", 1, uid, uid, None, 0, 1)
        con.execute(RAW_INSERT, values)
        con.execute("COMMIT")


async def main(workload, n, where):
    if workload == "raw":
        return raw(n, where)
    publish = workload in ("relay", "execute")
    app = rv.App(
        store=f"sqlite:///{where}/rv.db?synchronous=OFF",
        broker="memory://",
        options=rv.AppOptions(publish=publish),
    )
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment(by=1))
        agg = await log.load("a")
        if workload == "execute":
            for _ in range(n):
                await log.execute("a", Increment(by=1))
            return
        if workload == "decide":
            for _ in range(n):
                events, _ = agg.decide_all(Increment(by=1))
                for e in events:
                    agg.apply(e)
            return
        store, meta, events, base = app.store, Metadata(), [Incremented(by=1)], agg.version
        appender = store._appender
        info = appender.table_of(log.name)
        for v in range(base, base + n):
            rows = log._rows("a", v, events, meta, None, None)
            if workload == "rows":
                continue
            if workload == "txn":
                store.db.write_raw_sync(lambda cur: None)
            elif workload == "sql":
                sql, values = appender._lean(info, rows, False)
                bound = rows[0] if values is None else values(rows[0])
                store.db.write_raw_sync(lambda cur: cur.execute(sql, bound))
            elif workload == "lone":
                req = AppendRequest(log.name, rows, "a", v)
                store.db.write_raw_sync(partial(appender.one, req=req))
            else:  # store, relay
                await store.append(AppendRequest(log.name, rows, "a", v))


asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
"""
)

SMALL, LARGE = 1000, 11000


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.command_split")
    ap.add_argument("--out", type=Path, help="put the table into this file (BENCHMARKS.md)")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    got: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(CHILD)
        with ThreadPoolExecutor(2) as pool:
            for key, _ in STEPS:
                lo, hi = pool.map(partial(count, ROOT, child, key), (SMALL, LARGE))
                got[key] = (hi - lo) / (LARGE - SMALL)
                print(f"{key}: {got[key]:,.0f}", flush=True)
    own = {
        "decide": got["decide"],
        "rows": got["rows"],
        "txn": got["txn"] - got["rows"],
        "sql": got["sql"] - got["txn"],
        "lone": got["lone"] - got["sql"],
        "store": got["store"] - got["lone"],
        "relay": got["relay"] - got["store"],
        "execute": got["execute"] - got["relay"] - got["decide"],
    }
    names = {
        "decide": "deciding: the command, its handler, the event, `apply`",
        "rows": "the row: id, metadata, encoded fields",
        "txn": "`BEGIN IMMEDIATE` + `COMMIT` (nothing written)",
        "sql": "the INSERT itself (SQLite's work and the bind)",
        "lone": "the appender around it (`Appender.one`: the statement, the offsets, the result)",
        "store": "`store.append` around that (the inline write, heads, signals)",
        "relay": "the relay: the commit passed over (no subscriber), its task's own work",
        "execute": "`execute` around the rest (turn, cache, telemetry hooks, the result)",
    }
    lines = [
        "| step | instructions | share of `execute` |",
        "|---|--:|--:|",
        *(f"| {names[k]} | {v:,.0f} | {v / got['execute']:.0%} |" for k, v in own.items()),
        f"| **a sequential command (`execute`)** | **{got['execute']:,.0f}** | 100% |",
        f"| raw: a one-row transaction of the same columns (`sqlite3`) | {got['raw']:,.0f} | "
        f"{got['raw'] / got['execute']:.0%} |",
    ]
    body = "\n".join(
        [
            "### Where a sequential command's instructions go (callgrind)",
            "",
            "Command: `python -m bench.command_split` (each step a workload of its own, "
            "counted as `bench.instructions` counts; SQLite file, `synchronous=OFF`, the "
            "in-memory broker with no subscriber; see `bench/command_split.py`). A step's "
            "count is the difference between its workload and the one it builds on.",
            "",
            *lines,
        ]
    )
    print(body)
    if a.out:
        put_block(a.out, "command_split", body)


if __name__ == "__main__":
    main()
