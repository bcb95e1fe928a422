"""``python -m bench.adbc_builds [--versions A,B] [--rounds R] [--out FILE]``: the CPU
that releases of the ADBC drivers spend per row of a page of a topic's stored columns,
side by side in one run.

reventless reads Arrow pages through ``adbc-driver-postgresql`` (in the store's process)
and ``adbc-driver-sqlite`` (in its helper processes). Each driver is one shared library
that the driver manager loads by path, so two releases of a driver can be loaded into one
process and take turns on the same pages: this script downloads each release's wheels
from the package index (``pip download``, into a temporary folder), then reads

- PostgreSQL: 300,000 events of a topic, in pages of 2,000 (a catch-up's page), on the
  benchmark server (``bench.pgserver``: ``PGHOST``/``PGPORT``, a database of its own);
- SQLite: 100,000 events of a topic, in pages of 10,000 (``read_batches``' page), in a
  child process (the drivers carry their own SQLite, which must not share a process with
  the store's ``sqlite3``: the store is closed and the child only reads);

alternating the releases round by round. It reports the median wall time and the median
CPU time of the reading thread (``time.thread_time``) per row, and checks that both
releases give identical tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from .blocks import put_block
from .core import _app
from .pgserver import PgDb, PgServer
from .specs import Counter
from .workloads import rv_preload

DRIVERS = ("adbc-driver-postgresql", "adbc-driver-sqlite")
PG_EVENTS, PG_PAGE = 300_000, 2_000
SQLITE_EVENTS, SQLITE_PAGE = 100_000, 10_000


def _libraries(version: str, into: Path) -> dict[str, str]:
    """The shared library of each driver of release ``version`` (downloaded wheels)."""
    folder = into / version
    pins = [f"{d}=={version}" for d in DRIVERS]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder), *pins],
        check=True,
    )
    out: dict[str, str] = {}
    for wheel in folder.glob("*.whl"):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith(".so"):
                    z.extract(name, folder)
                    out["postgresql" if "postgresql" in name else "sqlite"] = str(folder / name)
    if set(out) != {"postgresql", "sqlite"}:
        raise SystemExit(f"release {version}: no driver library in its wheels ({out})")
    return out


def _read_pages(
    libraries: dict[str, str], uri: str, sql: str, events: int, page: int, rounds: int
) -> dict[str, Any]:
    """Each release's median wall and thread-CPU ns per row over ``rounds`` reads of the
    whole topic (releases alternating), and whether their last pages were equal."""
    import adbc_driver_manager as adbc
    import pyarrow as pa

    from reventless.store._arrowchild import _query  # the helpers' own read of a page

    # SQLite's in one batch per page, as the store's helpers read them
    batch_rows = None if uri.startswith("postgresql") else page
    handles = {}
    for version, library in libraries.items():
        db = adbc.AdbcDatabase(driver=library, uri=uri)
        handles[version] = (db, adbc.AdbcConnection(db))

    walls: dict[str, list[float]] = {v: [] for v in libraries}
    cpus: dict[str, list[float]] = {v: [] for v in libraries}
    last: dict[str, pa.Table] = {}
    order = list(libraries)
    for rnd in range(rounds + 1):  # the first round warms up (not counted)
        for version in order if rnd % 2 == 0 else order[::-1]:
            conn = handles[version][1]
            n = 0
            t0, c0 = time.perf_counter(), time.thread_time()
            for start in range(1, events + 1, page):
                text = f"{sql} WHERE _offset >= {start} ORDER BY _offset LIMIT {page}"
                got = _query(conn, text, batch_rows)
                n += got.num_rows
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            if n != events:
                raise SystemExit(f"release {version} read {n} rows of {events}")
            last[version] = got
            if rnd:
                walls[version].append(wall / n * 1e9)
                cpus[version].append(cpu / n * 1e9)
    for conn_db in handles.values():
        conn_db[1].close()
        conn_db[0].close()
    first = last[order[0]]
    return {
        "wall": {v: statistics.median(w) for v, w in walls.items()},
        "cpu": {v: statistics.median(c) for v, c in cpus.items()},
        "same": all(t.equals(first) for t in last.values()),
        "columns": first.num_columns,
    }


async def _fill(where: Path | PgDb, aggs: int) -> str:
    """Write ``aggs`` x 100 events of the benchmark's counter; the SELECT of its columns."""
    app = _app(where)
    log = app.event_log(Counter)
    async with app:
        await rv_preload(log, "ab", aggs, 100)
        select: str = app.store._select(log.name, None)  # type: ignore[attr-defined]
    return select


def _child(args: list[str]) -> None:
    """``--child URI SQL EVENTS PAGE ROUNDS LIBRARIES-JSON``: ``_read_pages`` in this
    process, its answer as JSON on stdout."""
    uri, sql, events, page, rounds, libraries = args
    got = _read_pages(json.loads(libraries), uri, sql, int(events), int(page), int(rounds))
    print(json.dumps(got))


def run(versions: list[str], rounds: int) -> str:
    with tempfile.TemporaryDirectory(prefix="rvadbc-") as tmp:
        root = Path(tmp)
        libraries = {v: _libraries(v, root) for v in versions}
        with PgServer() as server:
            db = server.new_db("adbc_builds")
            sql = asyncio.run(_fill(db, PG_EVENTS // 100))
            pg = _read_pages(
                {v: lib["postgresql"] for v, lib in libraries.items()},
                f"postgresql://{db.user}@{db.host}:{db.port}/{db.dbname}",
                sql,
                PG_EVENTS,
                PG_PAGE,
                rounds,
            )
        folder = root / "sqlite"
        folder.mkdir()
        sql = asyncio.run(_fill(folder, SQLITE_EVENTS // 100))
        sqlite_libraries = json.dumps({v: lib["sqlite"] for v, lib in libraries.items()})
        sizes = [str(SQLITE_EVENTS), str(SQLITE_PAGE), str(rounds)]
        command = [sys.executable, "-m", "bench.adbc_builds", "--child", str(folder / "rv.db")]
        child = subprocess.run(
            [*command, sql, *sizes, sqlite_libraries],
            check=True,
            capture_output=True,
            text=True,
        )
        lite = json.loads(child.stdout.strip().splitlines()[-1])
    base = versions[0]
    lines = [
        "## ADBC driver releases: CPU per row of a page",
        "",
        f"Command: `python -m bench.adbc_builds --versions {','.join(versions)} --rounds "
        f"{rounds}`. Each release's driver library, downloaded from the package index, "
        "loaded side by side into one process (SQLite's in a child process of its own) and "
        f"read in turns, {rounds} rounds after a warm-up, medians. Every stored column of "
        f"the benchmark's counter topic ({pg['columns']}): PostgreSQL {PG_EVENTS:,} events "
        f"in pages of {PG_PAGE:,} (binary COPY from the benchmark server), SQLite "
        f"{SQLITE_EVENTS:,} events in pages of {SQLITE_PAGE:,} (a WAL file). CPU: the "
        "reading thread's (`time.thread_time`), the driver's parsing and Arrow building; "
        "wall: the same reads, the server's work included.",
        "",
        "| driver | release | wall, ns per row | CPU, ns per row | CPU / " + base + " |",
        "|---|---|--:|--:|--:|",
    ]
    for name, got in (("postgresql", pg), ("sqlite", lite)):
        for v in versions:
            lines.append(
                f"| adbc-driver-{name} | {v} | {got['wall'][v]:,.0f} | {got['cpu'][v]:,.0f} | "
                f"{got['cpu'][v] / got['cpu'][base]:.2f}x |"
            )
    same = pg["same"] and lite["same"]
    lines += ["", f"The releases' pages were {'identical' if same else 'NOT identical'}."]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(prog="python -m bench.adbc_builds", description=__doc__)
    ap.add_argument("--versions", default="1.8.0,1.13.0")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    body = run([v for v in a.versions.split(",") if v], a.rounds)
    print(body)
    if a.out is not None:
        put_block(a.out, "adbc_builds", body)


if __name__ == "__main__":
    main()
