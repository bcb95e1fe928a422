"""Dynamic consistency boundaries: appends, decisions and query reads.
``python -m bench.dcb [--quick] [--postgres] [--out BENCHMARKS.md]``

Per store (a SQLite file, WAL, ``synchronous=FULL``; with ``--postgres`` also a local
PostgreSQL server, one fresh database per measurement):

- *Appends* (sequential, one event per transaction, events/s, alternating rounds, the
  median of 3): a plain DCB append (one tagged event, no condition), a conditional append
  (the same, with a condition on the event's own tag), and an ordinary aggregate command
  (``EventLog.execute`` on a fresh aggregate: load, decide, append one event).
- *Decisions* through ``DcbLog.execute``: course subscriptions (a handler with three
  decision models: the course's capacity, its subscriptions, the student's subscriptions)
  one at a time, and 8 / 64 in flight on disjoint tags (no two decisions in flight share
  a course or a student); invoice numbers (one model over every ``InvoiceCreated``: all
  decisions share one query) 8 / 64 in flight. Each with the in-process queue (the
  default) and without it (``DecideOptions(queue=False)``); attempts per decision (the
  retry limit is raised so that every decision lands; the table says how many would have
  run out of the default 10 attempts). The log is read back afterwards: every
  subscription landed, invoice numbers are 1..n.
- *Reads*: ``read(query)`` of one tag with 10 and with 1,000 matching events, p50, in a
  log of 10% and of 100% of ``--events`` (the matching events all lie in the first 10%),
  and the plan the database chose for it (``EXPLAIN``).
- *eventsourcing*: the same course-subscription decisions through the ``eventsourcing``
  library's DCB support (``eventsourcing.dcb``: a ``DCBApplication`` doing a ``Slice``
  with the same consistency boundary) where it has a recorder for the store.

Each measurement runs in its own process (``--child``): peak RSS (``VmHWM``) is that
process's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import reventless as rv
from reventless.store import require_sql
from reventless.store.dcb import query_sql

ROOT = Path(__file__).resolve().parent.parent
#: Decisions in flight at once, per lane layout (the course plan is laid out for the most).
LANES = 64
#: Enough retries that every decision lands (the default is 10).
PATIENT = 100_000
DEFAULT_ATTEMPTS = 10

# -- the course-subscription and invoice models (as in the README) --------------------------


class CourseDefined(rv.Event):
    course_id: Annotated[str, rv.Tag("course")]
    capacity: int


class StudentSubscribed(rv.Event):
    student_id: Annotated[str, rv.Tag("student")]
    course_id: Annotated[str, rv.Tag("course")]


class Subscribe(rv.Command):
    student_id: str
    course_id: str


class CourseCapacity(rv.DecisionModel[int]):
    """The course's places (0: no such course)."""

    def __init__(self, course_id: str) -> None:
        super().__init__(0, tags=[f"course:{course_id}"])

    @rv.folds(CourseDefined)
    def _defined(self, places: int, e: CourseDefined) -> int:
        return e.capacity


class Subscriptions(rv.DecisionModel[int]):
    """How many subscriptions carry a tag (a course's students, a student's courses)."""

    def __init__(self, tag: str) -> None:
        super().__init__(0, tags=[tag])

    @rv.folds(StudentSubscribed)
    def _subscribed(self, n: int, e: StudentSubscribed) -> int:
        return n + 1


MAX_COURSES = 10
courses = rv.Decider(events=CourseDefined | StudentSubscribed, name="courses")


@courses.decides(
    Subscribe,
    places=CourseCapacity,
    taken=lambda cmd: Subscriptions(f"course:{cmd.course_id}"),
    mine=lambda cmd: Subscriptions(f"student:{cmd.student_id}"),
)
def subscribe(cmd: Subscribe, places: int, taken: int, mine: int) -> StudentSubscribed:
    if taken >= places:
        raise rv.Rejected("course_full", f"{cmd.course_id} has {places} places")
    if mine >= MAX_COURSES:
        raise rv.Rejected("too_many_courses", cmd.student_id)
    return StudentSubscribed(student_id=cmd.student_id, course_id=cmd.course_id)


class InvoiceCreated(rv.Event):
    number: Annotated[int, rv.Tag("invoice")]
    amount_cents: int


class CreateInvoice(rv.Command):
    amount_cents: int


class NextNumber(rv.DecisionModel[int]):
    """The next invoice number: a query on the type alone, shared by every decision."""

    def __init__(self) -> None:
        super().__init__(1)

    @rv.folds(InvoiceCreated)
    def _created(self, n: int, e: InvoiceCreated) -> int:
        return e.number + 1


invoices = rv.Decider(events=InvoiceCreated, name="invoices")


@invoices.decides(CreateInvoice, number=NextNumber)
def create(cmd: CreateInvoice, number: int) -> InvoiceCreated:
    return InvoiceCreated(number=number, amount_cents=cmd.amount_cents)


def course_plan(n: int) -> tuple[list[tuple[str, str]], list[str]]:
    """``n`` (student, course) subscriptions and the courses they need, laid out so that
    decisions ``d`` and ``d'`` with ``d % LANES != d' % LANES`` share no tag (so lanes of
    any width dividing ``LANES`` are disjoint); ~10 subscriptions per course, 2 courses
    per student."""
    n_courses = LANES * max(2, n // (LANES * 10))
    plan = [(f"s{d % LANES}-{d // (2 * LANES)}", f"c{d % n_courses}") for d in range(n)]
    return plan, [f"c{i}" for i in range(n_courses)]


def lanes(items: Sequence[Any], width: int) -> list[list[Any]]:
    """``items`` dealt round-robin into ``width`` lanes (lane w: items w, w+width, ...)."""
    return [list(items[w::width]) for w in range(width)]


def peak_rss_mb() -> float:
    """This process's peak resident set size (``VmHWM``), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- appends -------------------------------------------------------------------------------


class Noted(rv.Event):
    key: Annotated[str, rv.Tag("k")]
    n: int


class Add(rv.Command):
    n: int


class Added(rv.Event):
    n: int


class Counter(rv.Aggregate):
    events = Added
    total: int = 0

    @rv.handles(Add)
    def add(self, cmd: Add) -> Added:
        return Added(n=cmd.n)

    @rv.applies(Added)
    def _added(self, e: Added) -> None:
        self.total += e.n


async def appends(url: str, n: int, rounds: int = 3) -> dict[str, float]:
    """Events/s of ``n`` sequential one-event transactions per kind, alternating kinds
    round by round; the median of ``rounds``."""
    app = rv.App(store=url)
    notes = app.dcb_log("notes", events=Noted)
    counters = app.event_log(Counter)

    async def plain(r: int, i: int) -> None:
        await notes.append([Noted(key=f"p{r}-{i}", n=i)])

    async def conditional(r: int, i: int) -> None:
        q = rv.Query.of(tags=[f"k:c{r}-{i}"])
        await notes.append([Noted(key=f"c{r}-{i}", n=i)], condition=rv.AppendCondition(q))

    async def aggregate(r: int, i: int) -> None:
        await counters.execute(f"a{r}-{i}", Add(n=i))

    kinds: dict[str, Callable[[int, int], Any]] = {
        "plain": plain,
        "cond": conditional,
        "agg": aggregate,
    }
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    async with app:
        for fn in kinds.values():  # warm-up: tables, statements, connections
            await fn(-1, 0)
        for r in range(rounds):
            order = list(kinds.items())
            for k, fn in order if r % 2 == 0 else reversed(order):
                t = time.perf_counter()
                for i in range(n):
                    await fn(r, i)
                rates[k].append(n / (time.perf_counter() - t))
        landed = await notes.head()
        assert landed == 2 * (rounds * n + 1), landed
        assert await counters.head() == rounds * n + 1
    out = {k: statistics.median(v) for k, v in rates.items()}
    return out | {"rss": peak_rss_mb()}


# -- decisions -----------------------------------------------------------------------------


async def drive(
    log: rv.DcbLog, work: list[list[rv.Command]], options: rv.DecideOptions
) -> tuple[float, float, list[int]]:
    """Run each lane of ``work`` in order, the lanes at once; (decisions/s, this
    process's CPU ms per decision, attempts)."""
    attempts: list[int] = []

    async def lane(cmds: list[rv.Command]) -> None:
        for cmd in cmds:
            attempts.append((await log.execute(cmd, options=options)).attempts)

    n = sum(map(len, work))
    t, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(lane(cmds) for cmds in work))
    return n / (time.perf_counter() - t), (time.process_time() - cpu) * 1000 / n, attempts


def record(out: dict[str, float], key: str, rate: float, cpu: float, attempts: list[int]) -> None:
    out[key] = rate
    out[f"{key}_cpu"] = cpu
    out[f"{key}_att"] = sum(attempts) / len(attempts)
    out[f"{key}_over"] = sum(a > DEFAULT_ATTEMPTS for a in attempts)


async def decisions(url: str, n_courses: int, n_invoices: int) -> dict[str, float]:
    """Course subscriptions (one at a time; 8 / 64 in flight on disjoint tags) and invoice
    numbers (8 / 64 in flight on one query), with and without the in-process queue."""
    plan, course_ids = course_plan(n_courses)
    cmds: list[rv.Command] = [Subscribe(student_id=s, course_id=c) for s, c in plan]
    bills: list[rv.Command] = [CreateInvoice(amount_cents=100 + i) for i in range(n_invoices)]
    runs: list[tuple[str, str, list[list[rv.Command]], bool]] = [
        ("c_seq", "c", [cmds], True),
        ("i_seq", "i", [bills], True),
    ]
    for width in (8, 64):
        for queue in (True, False):
            suffix = f"{width}{'q' if queue else 'n'}"
            runs.append((f"c_{suffix}", "c", lanes(cmds, width), queue))
            runs.append((f"i_{suffix}", "i", lanes(bills, width), queue))
    app = rv.App(store=url)
    logs: dict[str, rv.DcbLog] = {}
    for key, kind, _, _ in runs:
        if kind == "c":
            logs[key] = app.dcb_log(key, events=CourseDefined | StudentSubscribed)
            logs[key].include(courses)
        else:
            logs[key] = app.dcb_log(key, events=InvoiceCreated)
            logs[key].include(invoices)
    out: dict[str, float] = {}
    async with app:
        for key, kind, work, queue in runs:
            log = logs[key]
            if kind == "c":
                await log.append([CourseDefined(course_id=c, capacity=1000) for c in course_ids])
            print(f"  {key} ...", flush=True)
            options = rv.DecideOptions(PATIENT, queue=queue)
            rate, cpu, attempts = await drive(log, work, options)
            record(out, key, rate, cpu, attempts)
            # read back: every decision landed, invoice numbers are 1..n
            if kind == "c":
                got = await log.read(rv.Query.of(types=[StudentSubscribed]))
                assert len(got) == len(cmds), (key, len(got))
            else:
                got = await log.read(rv.Query.all())
                numbers = sorted(e.event.number for e in got)
                assert numbers == list(range(1, len(bills) + 1)), key
    return out | {"rss": peak_rss_mb()}


# -- reads ---------------------------------------------------------------------------------


async def explain(app: rv.App, log: rv.DcbLog, query: rv.Query) -> str:
    """The index scans the database plans for ``log.read(query)``."""
    store = require_sql(app.store, "bench.dcb")
    entry = store._entry(log.name)
    built = query_sql(store.db, entry.select_sql, entry.info, query, 0, None)
    assert built is not None
    sql, params = built
    sqlite = store.dialect == "sqlite"

    def work(conn: Any) -> list[Any]:
        cur = conn.connection.dbapi_connection.cursor()
        cur.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN ") + sql, tuple(params))
        return list(cur.fetchall())

    rows = await store.db.read(work)
    if sqlite:
        lines = [str(r[3]) for r in rows if str(r[3]).startswith(("SEARCH", "SCAN"))]
    else:
        lines = [str(r[0]).strip(" ->") for r in rows if " on " in str(r[0])]
        lines = [ln.split("  (")[0] for ln in lines]
    return "; ".join(dict.fromkeys(lines))


async def p50_ms(log: rv.DcbLog, query: rv.Query, expect: int, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        got = await log.read(query)
        times.append((time.perf_counter() - t) * 1000)
        assert len(got) == expect, len(got)
    return statistics.median(times)


async def reads(url: str, events: int) -> dict[str, Any]:
    """p50 of ``read`` of a tag with 10 / 1,000 matches at 10% and 100% of ``events``."""
    app = rv.App(store=url)
    log = app.dcb_log("reads", events=Noted)
    small = events // 10
    hot = {i * small // 1000: "hot1000" for i in range(1000)}
    hot |= {i * small // 10 + 1: "hot10" for i in range(10)}
    q10, q1000 = rv.Query.of(tags=["k:hot10"]), rv.Query.of(tags=["k:hot1000"])
    out: dict[str, Any] = {}
    batch = 1000  # on PostgreSQL an append takes one lock per distinct tag, in one SELECT
    async with app:
        t = time.perf_counter()
        for size, label in ((small, "small"), (events, "big")):
            for start in range(await log.head(), size, batch):
                idx = range(start, min(size, start + batch))
                await log.append([Noted(key=hot.get(i, f"n{i % 10_000}"), n=i) for i in idx])
            if label == "small":
                load = time.perf_counter() - t
            out[f"r10_{label}"] = await p50_ms(log, q10, 10, 200)
            out[f"r1000_{label}"] = await p50_ms(log, q1000, 1000, 40)
        out["load"] = small / load
        out["plan"] = await explain(app, log, q10)
    return out | {"rss": peak_rss_mb()}


# -- the parent: stores, child processes, the report ----------------------------------------


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"appends": 150, "courses": 128, "invoices": 64, "events": 20_000, "es": 128}
    return {"appends": 2000, "courses": 1536, "invoices": 320, "events": 100_000, "es": 1536}


def child(section: str, urls: list[str], quick: bool) -> dict[str, Any]:
    """Run ``section`` in a fresh process on ``urls``; its RESULT."""
    args = [sys.executable, "-m", "bench.dcb", "--child", section]
    args += [x for u in urls for x in ("--url", u)] + (["--quick"] if quick else [])
    out = subprocess.run(
        args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    sys.stdout.write(out.stdout.replace("RESULT ", "  result "))
    if out.returncode:
        raise RuntimeError(f"bench.dcb {section} failed:\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    raise RuntimeError(f"no result: {out.stdout}\n{out.stderr}")


def run_child(section: str, urls: list[str], quick: bool) -> None:
    print("RESULT " + json.dumps(section_result(section, urls, quick)), flush=True)


def section_result(section: str, urls: list[str], quick: bool) -> dict[str, Any]:
    """One section's measurements; ``all``: every section in turn (``urls`` in the order
    of ``measure``), in one process (the quick run: the calling one)."""
    s = sizes(quick)
    result: dict[str, Any]
    if section == "all":
        got = {k: section_result(k, [u], quick) for k, u in zip(_SECTIONS, urls, strict=False)}
        if len(urls) > len(_SECTIONS):
            got["es"] = section_result("es", urls[len(_SECTIONS) :], quick)
        return got
    if section == "appends":
        result = asyncio.run(appends(urls[0], s["appends"]))
    elif section == "decisions":
        result = asyncio.run(decisions(urls[0], s["courses"], s["invoices"]))
    elif section == "reads":
        result = asyncio.run(reads(urls[0], s["events"]))
    else:
        from bench.dcb_es import es_decisions

        result = es_decisions(urls, s["es"])
    return result


_SECTIONS = ("appends", "decisions", "reads")


def measure(new_url: Callable[[str], str], quick: bool, es: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if quick:  # the smoke run: every section in this process
        urls = [new_url(k) for k in _SECTIONS]
        urls += [new_url("es_seq"), new_url("es_8")] if es else []
        print(" all sections ...", flush=True)
        got: dict[str, dict[str, Any]] = section_result("all", urls, quick)
        return got
    for section in _SECTIONS:
        print(f" {section} ...", flush=True)
        out[section] = child(section, [new_url(section)], quick)
    if es:
        print(" eventsourcing ...", flush=True)
        out["es"] = child("es", [new_url("es_seq"), new_url("es_8")], quick)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.dcb")
    ap.add_argument("--quick", action="store_true", help="small sizes, well under a minute")
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL too")
    ap.add_argument("--out", default=None, help="a markdown file to put the section into")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", action="append", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        run_child(a.child, a.url, a.quick)
        return
    from bench.dcb_report import report

    results: dict[str, dict[str, dict[str, Any]]] = {}
    settings: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite file ...", flush=True)
        results["SQLite file (FULL)"] = measure(
            lambda n: f"sqlite:///{tmp}/{n}.db?synchronous=FULL", a.quick, es=False
        )
    if a.postgres:
        from bench.pgserver import PgServer

        print("PostgreSQL ...", flush=True)
        with PgServer() as pg:
            settings = pg.settings()
            results["PostgreSQL"] = measure(lambda n: pg.new_db(f"dcb_{n}").url, a.quick, True)
    cmd = "python -m bench.dcb" + (" --quick" if a.quick else "")
    cmd += " --postgres" if a.postgres else ""
    block = report(results, sizes(a.quick), cmd, settings)
    print(block)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "dcb", block)


if __name__ == "__main__":
    main()
