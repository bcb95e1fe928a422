"""Statistics, the console table and BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import sqlite3
import statistics
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .blocks import markers
from .workloads import SYSTEMS, Workload

Results = dict[str, dict[str, list[float]]]  # workload key -> system -> one value per rep

RAW_LABEL = {"sqlite": "raw sqlite3", "postgres": "raw psycopg"}

#: eventsourcing on PostgreSQL as measured in the issue, on this machine (events/s).
ISSUE_ES_PG = {"seq_append": 680.0, "batch10": 5100.0}


@dataclass(frozen=True)
class PgInfo:
    """What the PostgreSQL run was measured against."""

    server: str
    settings: dict[str, str]  # SHOW <server-wide setting>
    sessions: dict[str, tuple[str, ...]]  # contender -> pg.SESSION_SETTINGS on its connection


ANALYSIS_START = "<!-- analysis:start -->"
ANALYSIS_END = "<!-- analysis:end -->"
NATS_START, NATS_END = "<!-- nats:start -->", "<!-- nats:end -->"
#: Sections other bench scripts write into BENCHMARKS.md; a rewrite keeps them.
KEPT_BLOCKS = ("nats", "aws", "spark", "subscribe", "collector_where")


@dataclass(frozen=True)
class Stat:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Stat | None:
        if not values:
            return None
        return cls(statistics.median(values), min(values), max(values))


def revision() -> str:
    """The measured reventless revision (git), flagged when reventless/ has local changes."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "reventless")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes in reventless/" if dirty else "")


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "CPU": cpu,
        "nproc": str(len(os.sched_getaffinity(0))),
        "memory": mem or "unknown",
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": platform.python_version(),
        "SQLite library": sqlite3.sqlite_version,
        "reventless": f"{version('reventless')} (git {revision()})",
        "eventsourcing": version("eventsourcing"),
        "SQLAlchemy": version("SQLAlchemy"),
        "pydantic": version("pydantic"),
        "pyarrow": version("pyarrow"),
    }


def fmt(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def cell(st: Stat | None) -> str:
    if st is None:
        return "-"
    return f"{fmt(st.median)} ({fmt(st.low)}-{fmt(st.high)})"


def ratio(a: Stat | None, b: Stat | None) -> str:
    if a is None or b is None or b.median == 0:
        return "-"
    return f"{a.median / b.median:.2f}x"


def stats_for(w: Workload, results: Results) -> dict[str, Stat | None]:
    out: dict[str, Stat | None] = {}
    for system in SYSTEMS:
        source = w.source(system) or w.key
        out[system] = Stat.of(results.get(source, {}).get(system, []))
    return out


def rows(workloads: list[Workload], results: Results) -> list[list[str]]:
    out = []
    for i, w in enumerate(workloads, 1):
        st = stats_for(w, results)

        def shown(system: str, st: dict[str, Stat | None] = st, w: Workload = w) -> str:
            return cell(st[system]) + (" †" if w.source(system) else "")

        out.append(
            [
                str(i),
                w.title,
                w.unit,
                shown("reventless"),
                shown("eventsourcing"),
                shown("raw"),
                ratio(st["reventless"], st["eventsourcing"]),
                ratio(st["reventless"], st["raw"]),
            ]
        )
    return out


def header(store: str = "sqlite") -> list[str]:
    return [
        "#",
        "workload",
        "unit",
        "reventless",
        "eventsourcing",
        RAW_LABEL[store],
        "rv/es",
        "rv/raw",
    ]


HEADER = header()


def console_table(workloads: list[Workload], results: Results, store: str = "sqlite") -> str:
    body = rows(workloads, results)
    table = [header(store), *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    lines = []
    for j, r in enumerate(table):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    lat = latency_rows(workloads, results)
    if lat:
        lines.append("")
        lines.append(
            "load latency, ms per load (median): "
            + "; ".join(f"{t}: rv {a}, es {b}, raw {c}" for t, a, b, c in lat)
        )
    return "\n".join(lines)


def latency_rows(workloads: list[Workload], results: Results) -> list[tuple[str, str, str, str]]:
    out = []
    for w in workloads:
        if not w.latency:
            continue
        st = stats_for(w, results)

        def ms(s: Stat | None) -> str:
            if s is None:
                return "-"
            return f"{1000 / s.median:.2f} ({1000 / s.high:.2f}-{1000 / s.low:.2f})"

        out.append((w.title, ms(st["reventless"]), ms(st["eventsourcing"]), ms(st["raw"])))
    return out


def md_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    return "\n".join(lines)


def median(results: Results, key: str, system: str) -> float | None:
    st = Stat.of(results.get(key, {}).get(system, []))
    return None if st is None else st.median


def targets(results: Results) -> list[list[str]]:
    """SQLite targets."""
    out: list[list[str]] = []

    def row(name: str, want: str, got: str, ok: bool | None) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "NOT met")
        out.append([name, want, got, verdict])

    for key, label in (("seq_append", "sequential"), ("conc_append", "64 concurrent")):
        rv_ = median(results, key, "reventless")
        es = median(results, "seq_append", "eventsourcing")
        if rv_ is not None and es is not None:
            row(
                f"per-command append vs eventsourcing ({label})",
                ">= 3x eventsourcing",
                f"{rv_ / es:.2f}x ({fmt(rv_)} vs {fmt(es)} cmd/s)",
                rv_ / es >= 3,
            )
    raw = median(results, "bulk_concurrent", "raw")
    for key in ("bulk_concurrent", "bulk_calls"):
        rv_ = median(results, key, "reventless")
        if rv_ is not None and raw is not None:
            row(
                f"bulk append vs raw executemany ({key})",
                ">= 60% of raw",
                f"{100 * rv_ / raw:.0f}% ({fmt(rv_)} vs {fmt(raw)} events/s)",
                rv_ / raw >= 0.6,
            )
    for key, limit in (("load", 8.0), ("load_snap", 1.0)):
        rv_ = median(results, key, "reventless")
        if rv_ is not None:
            ms = 1000 / rv_
            row(f"{key}: 1000-event aggregate", f"<= {limit:g} ms", f"{ms:.2f} ms", ms <= limit)
    rv_ = median(results, "catchup", "reventless")
    if rv_ is not None:
        row("collector catch-up", ">= 50,000 events/s", f"{fmt(rv_)} events/s", rv_ >= 50_000)
    return out


def pg_targets(results: Results) -> list[list[str]]:
    """PostgreSQL targets (from the issue)."""
    out: list[list[str]] = []

    def row(name: str, want: str, got: str, ok: bool) -> None:
        out.append([name, want, got, "met" if ok else "NOT met"])

    for key, label, unit in (
        ("seq_append", "sequential, 1 event/tx", "cmd/s"),
        ("conc_append", "64 concurrent, 1 event/command", "cmd/s"),
        ("batch10", "10 events/tx", "events/s"),
    ):
        rv_ = median(results, key, "reventless")
        peer = "seq_append" if key == "conc_append" else key
        es = median(results, peer, "eventsourcing")
        if rv_ is None or es is None:
            continue
        issue = ISSUE_ES_PG[peer]
        row(
            f"per-command append vs eventsourcing ({label})",
            f">= 1.5x eventsourcing (issue: es {fmt(issue)}/s)",
            f"{rv_ / es:.2f}x ({fmt(rv_)} vs {fmt(es)} {unit}); "
            f"{rv_ / issue:.2f}x the issue's es number",
            rv_ / es >= 1.5,
        )
    raw = median(results, "bulk_concurrent", "raw")
    for key in ("bulk_concurrent", "bulk_calls"):
        rv_ = median(results, key, "reventless")
        if rv_ is not None and raw is not None:
            row(
                f"bulk append vs raw COPY binary ({key})",
                ">= 60% of raw COPY binary",
                f"{100 * rv_ / raw:.0f}% ({fmt(rv_)} vs {fmt(raw)} events/s)",
                rv_ / raw >= 0.6,
            )
    rv_ = median(results, "catchup", "reventless")
    if rv_ is not None:
        row(
            "collector catch-up into a PostgreSQL read model",
            ">= 30,000 events/s",
            f"{fmt(rv_)} events/s",
            rv_ >= 30_000,
        )
    return out


def timed_rows(workloads: list[Workload], level: str, only: str) -> list[str]:
    """One subsection per workload: the code inside the timed region, per contender."""
    parts: list[str] = []
    for i, w in enumerate(workloads, 1):
        parts.append(f"{level} {i}. {w.title} (`{only} {w.key}`)")
        parts.append("")
        for system in SYSTEMS:
            code = w.timed.get(system, "-")
            size = w.sizes.get(system)
            extra = f" ({size})" if size else ""
            parts.append(f"- {system}{extra}: `{code}`")
        borrowed: dict[str, list[str]] = {}
        for system in SYSTEMS:
            src = w.source(system)
            if src:
                borrowed.setdefault(src, []).append(system)
        for src, systems in borrowed.items():
            who = "peers" if systems == ["eventsourcing", "raw"] else ", ".join(systems)
            parts.append(f"- † {who}: the numbers of row `{src}` are repeated as the baseline.")
        parts.append("")
    return parts


def latency_table(workloads: list[Workload], results: Results, store: str) -> list[str]:
    lat = latency_rows(workloads, results)
    if not lat:
        return []
    return [
        "Load latency, ms per load (median (min-max)):",
        "",
        md_table(
            ["workload", "reventless", "eventsourcing", RAW_LABEL[store]], [list(r) for r in lat]
        ),
        "",
    ]


def sqlite_section(
    *,
    workloads: list[Workload],
    results: Results,
    durability: dict[str, tuple[str, str]],
    runner_probe: str,
) -> list[str]:
    sync_names = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
    parts = [
        "## Durability",
        "",
        "All three run with the same durability: **WAL journal, `synchronous=FULL`** "
        "(every commit fsyncs the WAL).",
        "",
        "- reventless: `sqlite:///…/rv.db?synchronous=FULL` (FULL is also its default; "
        "the store sets `PRAGMA journal_mode=WAL` on file databases).",
        "- eventsourcing: `eventsourcing.sqlite` switches file databases to "
        "`journal_mode=WAL` and never sets `synchronous`, so SQLite's compiled-in default "
        "applies (FULL = 2 for this SQLite build, confirmed below on its own connection).",
        "- raw: `PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL`, explicit "
        "`BEGIN`/`COMMIT` (autocommit connection).",
        "",
        "Checked on each contender's write connection at run time:",
        "",
        md_table(
            ["contender", "journal_mode", "synchronous"],
            [[k, jm, f"{sy} ({sync_names.get(sy, '?')})"] for k, (jm, sy) in durability.items()],
        ),
        "",
        "## Results",
        "",
        md_table(header("sqlite"), rows(workloads, results)),
        "",
        "† the peer has no equivalent mode, so these cells repeat the peer's number from the "
        "workload named below (as the ratio's baseline); they are not a separate "
        "measurement.",
        "",
        *latency_table(workloads, results, "sqlite"),
        "## Targets",
        "",
        md_table(["target", "wanted", "measured (median)", "verdict"], targets(results)),
        "",
        "## What each row times",
        "",
        "Only the code shown is inside the timed region; schema creation, preloading and "
        "(where shown in the code) one warm-up operation are outside it, and a sanity check "
        "after it verifies counts/values. Database files are deleted only at the end of the "
        "run (deleting them between measurements made the filesystem discard blocks while "
        "the next contender was being timed). reventless runs with "
        "`AppOptions(log=LogOptions(snapshot_every=0))` "
        "(except row `load_snap`), the in-memory broker, and no collectors except in "
        '`catchup`. The raw table is `events("offset" INTEGER PRIMARY KEY, aggregate_id, '
        "version, type, data, UNIQUE(aggregate_id, version))` with a JSON payload.",
        "",
        *timed_rows(workloads, "###", "--only"),
        "## Notes",
        "",
        "- Per-transaction rows (`seq_append`, `batch10`) are bounded by one fsync per "
        "transaction: the raw column is the ceiling for any library at this durability.",
        "- `conc_append` is reventless's group commit: concurrent `execute` calls that queue while "
        "a commit runs share the next transaction. eventsourcing's `Application.save` is "
        "synchronous and commits each call on its own, so its baseline is its sequential "
        "number; the raw baseline is likewise one row per commit.",
        "- eventsourcing's per-command loop keeps its aggregate in memory (no "
        "`repository.get` per command), like reventless's aggregate cache does for `execute`.",
        "- Bulk rows time persisting event objects built before the clock starts: reventless "
        "encodes them to rows (ids, metadata, offsets) inside the timed region; raw builds "
        "its 4-column tuples (one json.dumps per event) inside the timed region too. "
        "eventsourcing's path is `Application.save(*aggregates)` (one transaction, its "
        "application recorder inserts row by row to get notification ids).",
        "- Catch-up: eventsourcing's documented runner for a `Projection` is "
        "`ProjectionRunner`, which needs a recorder subscription; on SQLite it fails "
        f"(`{runner_probe}`). The row therefore drives the same `Projection` "
        "(`TotalsProjection` with a SQLite `TrackingRecorder` view that upserts the total "
        "and inserts the tracking record in one transaction) by pulling notifications "
        "from the application recorder in order, which is what the runner's subscription "
        "loop does. It commits once per event, so it runs on fewer events (see the `catchup` "
        "sizes; its counts include one `Created` event per aggregate); the rate is per "
        "event either way. reventless commits rows and checkpoint "
        "once per page (`CollectorOptions.page_size`, 2000); raw does the same per 2000.",
        "",
    ]
    return parts


def pg_section(*, workloads: list[Workload], results: Results, info: PgInfo) -> list[str]:
    from .pg import SESSION_SETTINGS

    version = info.settings.get("server_version", "?")
    same = all(
        dict(zip(SESSION_SETTINGS, v, strict=True)).get("synchronous_commit") == "on"
        and dict(zip(SESSION_SETTINGS, v, strict=True)).get("fsync") == "on"
        for v in info.sessions.values()
    )
    verdict = (
        "All three run with PostgreSQL's default durability, unchanged: **`fsync=on`, "
        "`synchronous_commit=on`** (every commit returns only after its WAL record is "
        f"flushed to disk with `{info.settings.get('wal_sync_method', '?')}`; "
        f"`commit_delay={info.settings.get('commit_delay', '?')}`, no server-side group "
        "commit delay)."
        if same
        else "**WARNING: the contenders do not all run with `fsync=on` and "
        "`synchronous_commit=on`** (see below): the rows are not comparable."
    )
    autovacuum = (
        "autovacuum is off on this server, so nothing works on the finished databases in "
        "the background."
        if info.settings.get("autovacuum") == "off"
        else "autovacuum is on: it may analyze/vacuum finished databases in the background "
        "while later rows are timed (noise)."
    )
    parts = [
        "## PostgreSQL",
        "",
        "The same workloads against a local PostgreSQL server "
        f"({version} at `{info.server}`): reventless on its store URL "
        "`postgresql+psycopg://postgres@HOST:PORT/DB` (psycopg 3), eventsourcing on "
        "`eventsourcing.postgres` (`PERSISTENCE_MODULE=eventsourcing.postgres`, "
        "`POSTGRES_DBNAME`/`POSTGRES_HOST`/`POSTGRES_PORT`/`POSTGRES_USER`/"
        "`POSTGRES_PASSWORD` (empty: trust authentication), everything else its defaults), "
        "and raw psycopg 3 on the same 4-column row shape as raw `sqlite3`. Every "
        "measurement gets a fresh database created for it (`CREATE DATABASE "
        "rvbench_<run>_<n>_<row>`), and a `CHECKPOINT` before the clock starts so that no "
        "contender pays for flushing the previous one's writes; the run drops all its "
        "databases at the end (`DROP DATABASE ... WITH (FORCE)`). Cells, repetitions and "
        "interleaving as above.",
        "",
        "Reproduce one row: `.venv/bin/pip install -e '.[bench]'`, `bash "
        "infra/local/postgres.sh` (starts the server if it is down), then "
        "`.venv/bin/python -m bench --store postgres --only <key>` (keys below; "
        "`PGHOST`/`PGPORT`/`PGUSER` select another server).",
        "",
        "### Durability (PostgreSQL)",
        "",
        verdict,
        "",
        "Server settings (`SHOW`, at run time):",
        "",
        md_table(["setting", "value"], [[k, f"`{v}`"] for k, v in info.settings.items()]),
        "",
        "Checked on each contender's own (write) connection at run time "
        "(`synchronous_commit` can be changed per session):",
        "",
        md_table(["contender", *SESSION_SETTINGS], [[k, *v] for k, v in info.sessions.items()]),
        "",
        "### Results (PostgreSQL)",
        "",
        md_table(header("postgres"), rows(workloads, results)),
        "",
        "† not measured in this row (the contender has no equivalent mode, or the row is a "
        "raw-only reference): the cell repeats the contender's number from the row named "
        "below, as the ratio's baseline; it is not a separate measurement.",
        "",
        *latency_table(workloads, results, "postgres"),
        "### Targets (PostgreSQL)",
        "",
        md_table(["target", "wanted", "measured (median)", "verdict"], pg_targets(results)),
        "",
        "### What each row times (PostgreSQL)",
        "",
        "As on SQLite: only the code shown is timed; setup, preloading and warm-up are "
        'outside it, and a sanity check follows it. The raw table is `events("offset" '
        "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, aggregate_id text, version "
        "bigint, type text, data text, UNIQUE (aggregate_id, version))`, written on an "
        "autocommit psycopg connection with explicit transactions (`conn.transaction()`).",
        "",
        *timed_rows(workloads, "####", "--store postgres --only"),
        "### Notes (PostgreSQL)",
        "",
        "- Every commit waits for a WAL flush, so per-transaction rows (`seq_append`, "
        "`batch10`) are bounded by the flush rate; the raw column is the ceiling.",
        "- Offsets differ in what they guarantee. raw takes ids from an identity sequence "
        "(neither gapless nor in commit order: a reader tailing by id can skip a row that "
        "commits late). reventless reserves gapless per-topic offsets by bumping the "
        "topic's counter row in `rv_topics` inside the appending transaction (the row lock "
        "is held to commit, so offsets commit in order) and sends `pg_notify` with each "
        "commit (LISTEN/NOTIFY wake-up for collectors of other processes). eventsourcing "
        "takes `LOCK TABLE ... IN EXCLUSIVE MODE` in every insert transaction for the "
        "same reason and inserts through `unnest()` of a composite-type array, returning "
        "the notification ids.",
        "- reventless writes groups of >= 64 rows with `COPY ... FROM STDIN (FORMAT "
        "BINARY)` and smaller ones with `executemany`; `bulk_concurrent` is one group "
        "commit (one COPY of all rows), `bulk_calls` one COPY per call.",
        "- `conc_append`: as on SQLite, eventsourcing has no async API and commits each "
        "`save` on its own, so its baseline is its sequential number.",
        "- eventsourcing's `bulk_concurrent` runs on fewer events (see its size): with "
        "psycopg 3.3 its `app.save()` of 50,000+ events in one call hangs for good in "
        "`Pipeline.sync()` (client waiting for results, server backend in `ClientRead` "
        "waiting for the rest of the message; 40,000 passed). The same hang reproduces "
        "with plain psycopg: one `INSERT ... SELECT unnest(%s::bytea[])` of 100,000 64-byte "
        "values inside `conn.pipeline()` (~6 MB), while 50,000 pass. Its rate is flat from "
        "20,000 to 40,000 events (39-41k events/s measured), so the per-event rate stands.",
        "- `bulk_copy_text` is a raw-only reference row: the rows of `bulk_concurrent` "
        "written with COPY's text format (psycopg formats each value as text; the server "
        "parses it).",
        "- Databases are dropped only at the end of the run: this filesystem is mounted "
        "with `discard`, so deleting files between measurements would make it discard "
        "blocks while the next contender is timed. " + autovacuum,
        "- Catch-up: on PostgreSQL eventsourcing's documented `ProjectionRunner` works (its "
        "subscription uses LISTEN/NOTIFY), so the row uses it: the clock starts before the "
        "runner is constructed (like reventless's `app.start()`, this includes creating "
        "the view's tables and opening connections) and stops when the view's tracking "
        "record reaches the last notification id (polled every 5 ms; `runner.wait()` polls "
        "with a back-off of up to 0.8 s). Its view commits once per event, so it runs on "
        "fewer events; the rate is per event either way. reventless commits rows and "
        "checkpoint once per page (`CollectorOptions.page_size`, 2000); raw does the same "
        "per 2000.",
        "",
    ]
    return parts


def markdown(
    *,
    plans: dict[str, list[Workload]],
    results: dict[str, Results],
    reps: int,
    quick: bool,
    command: str,
    durability: dict[str, tuple[str, str]],
    runner_probe: str,
    pg_info: PgInfo | None,
    previous: str | None,
    machine_info: dict[str, str],
    kept: dict[str, str] | None = None,
    extra_sections: list[str] | None = None,
) -> str:
    stores = [s for s, ws in plans.items() if ws]
    m = dict(machine_info)
    if pg_info is not None and "postgres" in stores:
        m["PostgreSQL server"] = pg_info.settings.get("server_version", "?")
        for dist in ("psycopg", "psycopg-pool"):
            try:
                m[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                m[dist] = "not installed"
    if stores == ["sqlite"]:
        intro = (
            "reventless vs the [eventsourcing](https://pypi.org/project/eventsourcing/) "
            "library vs raw `sqlite3`, all on a SQLite **file** in a temporary directory."
        )
        fresh = "each on a fresh database file"
        reproduce = "`.venv/bin/python -m bench --only <key>` (keys below)."
    else:
        intro = (
            "reventless vs the [eventsourcing](https://pypi.org/project/eventsourcing/) "
            "library vs the raw driver, on a SQLite **file** in a temporary directory (raw "
            "`sqlite3`) and on **PostgreSQL** (raw `psycopg`; [its own section]"
            "(#postgresql) below the SQLite one)."
            if "sqlite" in stores
            else "reventless vs the [eventsourcing](https://pypi.org/project/eventsourcing/) "
            "library vs raw `psycopg`, all on **PostgreSQL**."
        )
        fresh = "each on a fresh database (SQLite file or PostgreSQL database)"
        reproduce = (
            "`.venv/bin/python -m bench --only <key>` (keys below; add `--store postgres` "
            "for the PostgreSQL rows)."
        )
    parts = [
        "# Benchmarks",
        "",
        intro,
        "",
        f"Generated by `{command}` ({'quick smoke run' if quick else 'full run'}, "
        f"{reps} repetitions). Each repetition runs every workload for every contender, "
        "interleaved (the order of the contenders rotates from one repetition to the next), "
        f"{fresh}; cells show the **median (min-max)** over the "
        "repetitions. Ratios compare medians; > 1 means reventless is faster.",
        "",
        "Reproduce one row, from the repository root: `.venv/bin/pip install -e '.[bench]'` then "
        + reproduce,
        "",
        "## Machine",
        "",
        md_table(["", ""], [[k, v] for k, v in m.items()]),
        "",
    ]
    if "sqlite" in stores:
        parts += sqlite_section(
            workloads=plans["sqlite"],
            results=results["sqlite"],
            durability=durability,
            runner_probe=runner_probe,
        )
    if "postgres" in stores and pg_info is not None:
        parts += pg_section(workloads=plans["postgres"], results=results["postgres"], info=pg_info)
    parts += extra_sections or []
    if previous:
        parts += [ANALYSIS_START, previous.strip(), ANALYSIS_END, ""]
    for name, block in (kept or {}).items():  # written by bench.nats_fanout, bench.aws, ...
        parts += [f"<!-- {name}:start -->", block.strip(), f"<!-- {name}:end -->", ""]
    return "\n".join(parts)


def kept_blocks(path: Path) -> dict[str, str]:
    """The sections other bench scripts wrote into ``path`` (kept on rewrite)."""
    out = {}
    for name in KEPT_BLOCKS:
        block = previous_block(path, *markers(name))
        if block:
            out[name] = block
    return out


def previous_analysis(path: Path) -> str | None:
    """The hand-written analysis block of an existing BENCHMARKS.md (kept on rewrite)."""
    return previous_block(path, ANALYSIS_START, ANALYSIS_END)


def previous_block(path: Path, start: str, end: str) -> str | None:
    """The text between two markers of an existing file, if any."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if start in text and end in text:
        return text.split(start, 1)[1].split(end, 1)[0]
    return None
