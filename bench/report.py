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

from .workloads import SYSTEMS, Workload

Results = dict[str, dict[str, list[float]]]  # workload key -> system -> one value per rep

ANALYSIS_START = "<!-- analysis:start -->"
ANALYSIS_END = "<!-- analysis:end -->"


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
    mine = results.get(w.key, {})
    peers = results.get(w.peer_from, {}) if w.peer_from else mine
    out: dict[str, Stat | None] = {}
    for system in SYSTEMS:
        values = mine.get(system, []) if system == "reventless" else peers.get(system, [])
        out[system] = Stat.of(values)
    return out


def rows(workloads: list[Workload], results: Results) -> list[list[str]]:
    out = []
    for i, w in enumerate(workloads, 1):
        st = stats_for(w, results)
        mark = " †" if w.peer_from else ""
        out.append(
            [
                str(i),
                w.title,
                w.unit,
                cell(st["reventless"]),
                cell(st["eventsourcing"]) + mark,
                cell(st["raw"]) + mark,
                ratio(st["reventless"], st["eventsourcing"]),
                ratio(st["reventless"], st["raw"]),
            ]
        )
    return out


HEADER = [
    "#",
    "workload",
    "unit",
    "reventless",
    "eventsourcing",
    "raw sqlite3",
    "rv/es",
    "rv/raw",
]


def console_table(workloads: list[Workload], results: Results) -> str:
    body = rows(workloads, results)
    table = [HEADER, *body]
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


def markdown(
    *,
    workloads: list[Workload],
    results: Results,
    reps: int,
    quick: bool,
    command: str,
    durability: dict[str, tuple[str, str]],
    runner_probe: str,
    previous: str | None,
    machine_info: dict[str, str],
) -> str:
    sync_names = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
    m = machine_info
    parts = [
        "# Benchmarks",
        "",
        "reventless vs the [eventsourcing](https://pypi.org/project/eventsourcing/) library "
        "vs raw `sqlite3`, all on a SQLite **file** in a temporary directory.",
        "",
        f"Generated by `{command}` ({'quick smoke run' if quick else 'full run'}, "
        f"{reps} repetitions). Each repetition runs every workload for every contender, "
        "interleaved (the order of the contenders rotates from one repetition to the next), "
        "each on a fresh database file; cells show the **median (min-max)** over the "
        "repetitions. Ratios compare medians; > 1 means reventless is faster.",
        "",
        "Reproduce one row, from the repository root: `.venv/bin/pip install -e '.[bench]'` then "
        "`.venv/bin/python -m bench --only <key>` (keys below).",
        "",
        "## Machine",
        "",
        md_table(["", ""], [[k, v] for k, v in m.items()]),
        "",
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
        md_table(HEADER, rows(workloads, results)),
        "",
        "† the peer has no equivalent mode, so these cells repeat the peer's number from the "
        "workload named below (as the ratio's baseline); they are not a separate "
        "measurement.",
        "",
    ]
    lat = latency_rows(workloads, results)
    if lat:
        parts += [
            "Load latency, ms per load (median (min-max)):",
            "",
            md_table(
                ["workload", "reventless", "eventsourcing", "raw sqlite3"], [list(r) for r in lat]
            ),
            "",
        ]
    parts += [
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
    ]
    for i, w in enumerate(workloads, 1):
        parts.append(f"### {i}. {w.title} (`--only {w.key}`)")
        parts.append("")
        for system in SYSTEMS:
            code = w.timed.get(system, "-")
            size = w.sizes.get(system)
            extra = f" ({size})" if size else ""
            parts.append(f"- {system}{extra}: `{code}`")
        if w.peer_from:
            parts.append(
                f"- † peers: the numbers of row `{w.peer_from}` are repeated as the baseline."
            )
        parts.append("")
    parts += [
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
    if previous:
        parts += [ANALYSIS_START, previous.strip(), ANALYSIS_END, ""]
    return "\n".join(parts)


def previous_analysis(path: Path) -> str | None:
    """The hand-written analysis block of an existing BENCHMARKS.md (kept on rewrite)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if ANALYSIS_START in text and ANALYSIS_END in text:
        return text.split(ANALYSIS_START, 1)[1].split(ANALYSIS_END, 1)[0]
    return None
