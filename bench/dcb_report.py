"""The markdown section ``bench.dcb`` writes (``<!-- dcb:start -->`` ... ``<!-- dcb:end -->``).

Example::

    block = report({"SQLite file (FULL)": {...}}, sizes(False), "python -m bench.dcb", {})
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

Results = dict[str, dict[str, dict[str, Any]]]


def _es_version() -> str:
    try:
        return version("eventsourcing")
    except PackageNotFoundError:  # pragma: no cover - the bench extra installs it
        return "not installed"


def _table(results: Results, rows: list[tuple[str, Any]]) -> list[str]:
    """``rows`` of (label, cell function of one store's results) as a table by store."""
    names = list(results)
    out = ["| measure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(results[n]) for n in names) + " |")
    return out


def _rate(section: str, key: str) -> Any:
    return lambda r: f"{r[section][key]:,.0f}"


def _decided(key: str) -> Any:
    def cell(r: dict[str, dict[str, Any]]) -> str:
        d = r["decisions"]
        over = int(d[f"{key}_over"])
        tail = f"; {over} over 10" if over else ""
        return f"{d[key]:,.0f} ({d[f'{key}_att']:.2f}{tail})"

    return cell


def report(results: Results, sizes: dict[str, int], cmd: str, settings: dict[str, str]) -> str:
    """The section: appends, decisions, reads, and eventsourcing beside reventless."""
    events, small = sizes["events"], sizes["events"] // 10
    pg = "PostgreSQL" in results
    lines = [
        "",
        "## Dynamic consistency boundaries (DCB)",
        "",
        f"Command: `{cmd}`. Each part runs in its own process with one App (peak RSS is "
        "that process's `VmHWM`); one run, and on a shared 2-core machine runs differ by "
        "up to ~25%. SQLite: a file, WAL, `synchronous=FULL`."
        + (
            " PostgreSQL: the local server (`synchronous_commit="
            f"{settings.get('synchronous_commit', '?')}`, `fsync={settings.get('fsync', '?')}`"
            "), a fresh database per part."
            if pg
            else ""
        ),
        "",
        f"**Appends**: {sizes['appends']:,} sequential transactions of one event per kind and "
        "round, kinds alternating, median of 3 rounds; events/s. Plain: a DCB append of one "
        "tagged event, no condition. Conditional: the same with `AppendCondition` on the "
        "event's own tag (an index probe inside the write transaction; on PostgreSQL also "
        "the tag's advisory lock). Aggregate: `EventLog.execute` of a command on a fresh "
        "aggregate (load, decide, append one event).",
        "",
    ]
    lines += _table(
        results,
        [
            ("plain DCB append, events/s", _rate("appends", "plain")),
            ("conditional append (1 tag), events/s", _rate("appends", "cond")),
            ("aggregate command (`EventLog.execute`), events/s", _rate("appends", "agg")),
            (
                "conditional / plain",
                lambda r: f"{r['appends']['cond'] / r['appends']['plain']:.2f}",
            ),
            (
                "aggregate command / plain",
                lambda r: f"{r['appends']['agg'] / r['appends']['plain']:.2f}",
            ),
            ("peak RSS, MB", lambda r: f"{r['appends']['rss']:.0f}"),
        ],
    )
    lines += [
        "",
        f"**Decisions** through `DcbLog.execute`, decisions/s (attempts per decision). Course "
        f"subscriptions: {sizes['courses']:,} decisions, each with three decision models "
        "(course capacity, course subscriptions, student subscriptions: one union query "
        "read, one conditional append), ~10 per course, 2 courses per student; in flight, "
        "no two decisions share a course or a student. Invoice numbers: "
        f"{sizes['invoices']:,} decisions whose one model reads every `InvoiceCreated` (one "
        "shared query: each decision conflicts with every other in flight). *queue*: the "
        "in-process `DecisionQueue` (the default); *no queue*: `DecideOptions(queue=False)`. "
        "The retry limit is raised so that every decision lands; *over 10* counts the "
        "decisions that would have run out of the default `max_attempts=10`. Afterwards the "
        "log is read back: every subscription landed, the invoice numbers are 1..n. "
        "Decisions in flight overlap their reads, not their commits: appends to one DCB log "
        "meet at its counter row from the bump to the commit (SQLite: one writer at a time).",
        "",
    ]
    drows: list[tuple[str, Any]] = [("courses, one at a time", _decided("c_seq"))]
    for width in (8, 64):
        for q, qname in (("q", "queue"), ("n", "no queue")):
            drows.append(
                (f"courses, {width} in flight, disjoint tags, {qname}", _decided(f"c_{width}{q}"))
            )
    drows.append(("invoices, one at a time", _decided("i_seq")))
    for width in (8, 64):
        for q, qname in (("q", "queue"), ("n", "no queue")):
            drows.append(
                (f"invoices, {width} in flight, one query, {qname}", _decided(f"i_{width}{q}"))
            )
    drows.append(("peak RSS, MB", lambda r: f"{r['decisions']['rss']:.0f}"))
    lines += _table(results, drows)
    lines += [
        "",
        f"**Reads**: `read(Query.of(tags=[tag]))` p50 in ms, for a tag with 10 and one with "
        f"1,000 matching events, all among the first {small:,} events; measured at "
        f"{small:,} events and again after the log grew to {events:,} (loaded by DCB appends "
        "of 1,000 events each).",
        "",
    ]
    lines += _table(
        results,
        [
            (f"tag with 10 events, log of {small:,}", lambda r: f"{r['reads']['r10_small']:.2f}"),
            (f"tag with 10 events, log of {events:,}", lambda r: f"{r['reads']['r10_big']:.2f}"),
            (
                f"tag with 1,000 events, log of {small:,}",
                lambda r: f"{r['reads']['r1000_small']:.2f}",
            ),
            (
                f"tag with 1,000 events, log of {events:,}",
                lambda r: f"{r['reads']['r1000_big']:.2f}",
            ),
            ("loading, events/s", _rate("reads", "load")),
            (f"peak RSS (log of {events:,}), MB", lambda r: f"{r['reads']['rss']:.0f}"),
        ],
    )
    lines.append("")
    lines += [f"- plan of the read, {n}: `{r['reads']['plan']}`" for n, r in results.items()]
    lines += ["", *_es_lines(results, sizes)]
    return "\n".join(lines)


def _es_lines(results: Results, sizes: dict[str, int]) -> list[str]:
    ver = _es_version()
    head = (
        f"**Beside `eventsourcing` {ver}** (`eventsourcing.dcb`): it has DCB recorders for "
        "PostgreSQL (`eventsourcing.dcb.postgres_tt`) and in memory, none for SQLite."
    )
    pg = results.get("PostgreSQL", {}).get("es")
    if pg is None:
        return [head + " Run with `--postgres` for the comparison."]
    rv_d = results["PostgreSQL"]["decisions"]
    lines = [
        head + f" The same {sizes['es']:,} course-subscription decisions on the same "
        "PostgreSQL server, both committing each decision in its own transaction with the "
        "server's `synchronous_commit` (equal durability): a `Slice` with the same "
        "consistency boundary done by `DCBApplication.do`, retried on `IntegrityError` "
        "with the same backoff (`do` does not retry), events as JSON; in flight: 8 threads "
        "(pool of 8 connections) against reventless's 8 asyncio tasks (with the queue). "
        "eventsourcing's conditional append locks the events table (`LOCK TABLE ... IN "
        "EXCLUSIVE MODE`), so its conditional appends take turns; reventless's lock only "
        "the tags they check. Client CPU: the deciding process's CPU time per decision "
        "(the 2 cores also run the server).",
        "",
        "| PostgreSQL | reventless | eventsourcing | reventless / eventsourcing |",
        "|---|---|---|---|",
    ]
    for label, rk, ek in (
        ("courses, one at a time, decisions/s", "c_seq", "es_seq"),
        ("courses, 8 in flight, disjoint tags, decisions/s", "c_8q", "es_8"),
    ):
        lines.append(
            f"| {label} | {rv_d[rk]:,.0f} ({rv_d[f'{rk}_att']:.2f}) | "
            f"{pg[ek]:,.0f} ({pg[f'{ek}_att']:.2f}) | {rv_d[rk] / pg[ek]:.2f} |"
        )
    for label, rk, ek in (
        ("client CPU per decision, ms, one at a time", "c_seq", "es_seq"),
        ("client CPU per decision, ms, 8 in flight", "c_8q", "es_8"),
    ):
        rc, ec = rv_d[f"{rk}_cpu"], pg[f"{ek}_cpu"]
        lines.append(f"| {label} | {rc:.2f} | {ec:.2f} | {rc / ec:.2f} |")
    lines.append(f"| eventsourcing process peak RSS, MB | | {pg['rss']:.0f} | |")
    return lines
