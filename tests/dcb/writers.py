"""Writer processes of the DCB concurrency tests (importable by spawned processes): each
builds its own App on the shared store and runs the examples' commands."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import reventless as rv
from examples.dcb.courses import EVENTS as COURSE_EVENTS
from examples.dcb.courses import SubscribeStudent, courses
from examples.dcb.invoices import CreateInvoice, InvoiceCreated, invoices
from examples.dcb.usernames import EVENTS as ACCOUNT_EVENTS
from examples.dcb.usernames import ChangeUsername, CloseAccount, RegisterAccount, accounts

#: This writer process's barrier (``start_together``), for a second meeting (``started``).
_barrier: Any = None


def start_together(barrier: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` once every writer process is up (imports done): spawned processes
    start seconds apart on a loaded machine, and one that finished before the others began
    would race no one."""
    global _barrier
    _barrier = barrier
    barrier.wait(timeout=120)
    return fn(*args)


def started() -> None:
    """Wait until every writer has started its App too (the barrier again): opening a
    store takes a varying part of a second, longer than a writer's decisions may take, so
    writers that met before opening theirs could still run one after another."""
    if _barrier is not None:
        _barrier.wait(timeout=120)


#: Contention is the point here: retry until the decision lands or is rejected.
PATIENT = rv.DecideOptions(max_attempts=500, backoff_base=0.002, backoff_max=0.05)


class _Retries(logging.Handler):
    """Counts the framework's "clashed with another writer, retrying" records: every
    retry, of decisions that landed and of those refused after a retry alike."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "clashed with another writer" in record.getMessage():
            self.count += 1


async def _outcome(run: Awaitable[rv.DecisionResult]) -> tuple[str, rv.DecisionResult | None]:
    try:
        return "ok", await run
    except rv.Rejected as r:
        return r.code, None


async def _gather(
    jobs: Iterable[Callable[[], Awaitable[rv.DecisionResult]]], in_flight: int
) -> list[tuple[str, rv.DecisionResult | None]]:
    gate = asyncio.Semaphore(in_flight)

    async def one(job: Callable[[], Awaitable[rv.DecisionResult]]) -> Any:
        async with gate:
            return await _outcome(job())

    return list(await asyncio.gather(*(one(j) for j in jobs)))


def subscribe_everyone(
    url: str, worker: int, students: list[str], course_ids: list[str], in_flight: int = 3
) -> dict[str, int]:
    """Try every (student, course) subscription in a shuffled order; outcome counts (and
    ``attempts``, the decisions made by the ones that landed; ``retries``, every retry)."""

    async def main() -> dict[str, int]:
        app = rv.App(store=url)
        log = app.dcb_log("courses", events=COURSE_EVENTS)
        log.include(courses)
        pairs = [(s, c) for s in students for c in course_ids]
        random.Random(worker).shuffle(pairs)
        retries = _Retries()
        logger = logging.getLogger("reventless.telemetry")
        logger.addHandler(retries)
        logger.setLevel(logging.INFO)
        async with app:
            started()
            out = await _gather(
                (
                    lambda s=s, c=c: log.execute(
                        SubscribeStudent(student_id=s, course_id=c), options=PATIENT
                    )
                    for s, c in pairs
                ),
                in_flight,
            )
        counts = Counter(code for code, _ in out)
        counts["attempts"] = sum(r.attempts for _, r in out if r is not None)
        counts["retries"] = retries.count
        return dict(counts)

    return asyncio.run(main())


def churn_usernames(url: str, worker: int, names: list[str], rounds: int) -> dict[str, int]:
    """Register accounts with names from a small pool, change and close some: claims,
    releases and re-claims racing with the other workers. Outcome counts."""

    async def main() -> dict[str, int]:
        app = rv.App(store=url)
        log = app.dcb_log("accounts", events=ACCOUNT_EVENTS)
        log.include(accounts)
        rnd = random.Random(worker)
        counts: Counter[str] = Counter()
        async with app:
            for i in range(rounds):
                account = f"w{worker}-{i}"
                code, _ = await _outcome(
                    log.execute(
                        RegisterAccount(account_id=account, username=rnd.choice(names)),
                        options=PATIENT,
                    )
                )
                counts[f"register:{code}"] += 1
                if code != "ok":
                    continue
                if rnd.random() < 0.5:
                    code, _ = await _outcome(
                        log.execute(
                            ChangeUsername(account_id=account, username=rnd.choice(names)),
                            options=PATIENT,
                        )
                    )
                    counts[f"change:{code}"] += 1
                code, _ = await _outcome(
                    log.execute(CloseAccount(account_id=account), options=PATIENT)
                )
                counts[f"close:{code}"] += 1
        return dict(counts)

    return asyncio.run(main())


def create_invoices(url: str, worker: int, n: int, in_flight: int = 2) -> list[int]:
    """Create ``n`` invoices for customer ``w<worker>``; the numbers they got."""

    async def main() -> list[int]:
        app = rv.App(store=url)
        log = app.dcb_log("invoices", events=InvoiceCreated)
        log.include(invoices)
        async with app:
            out = await _gather(
                (
                    lambda: log.execute(
                        CreateInvoice(customer=f"w{worker}", amount_cents=100), options=PATIENT
                    )
                    for _ in range(n)
                ),
                in_flight,
            )
        numbers = []
        for code, res in out:
            assert code == "ok" and res is not None, code
            [event] = res.events
            assert isinstance(event, InvoiceCreated)
            numbers.append(event.number)
        return numbers

    return asyncio.run(main())
