"""``reventless dead-letters``, ``redrive``, ``schedules`` and ``redrive-schedules``: what
components and the scheduler gave up on, listed and retried.

Example::

    reventless dead-letters --store sqlite:///shop.db --json
    reventless redrive order_confirmations --app examples.shop.model:app --store sqlite:///shop.db
    reventless schedules --store sqlite:///shop.db --status dead
    reventless redrive-schedules --store sqlite:///shop.db
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import ReventlessError
from .loading import FACTORY_RULE, load_app
from .log import DEFAULT_STORE, Json, Store, open_admin
from .output import Meter, meter, print_json, table
from .params import COUNT
from .run import UsageError, run

if TYPE_CHECKING:
    from ..app import App
    from ..deadletter import DeadLetter, RedriveReport
    from ..store.schedules import StoredSchedule

#: Seconds between two reads of the open dead letters while ``redrive`` runs.
REDRIVE_POLL = 0.2

AppSpec = Annotated[str, typer.Option("--app", help=FACTORY_RULE)]
FactoryStore = Annotated[
    str | None, typer.Option("--store", help="store URL passed to the --app factory")
]


def letter_json(d: DeadLetter) -> dict[str, Any]:
    """A dead letter with stable keys (``id`` 0: a broker queue's message, not a row)."""
    return {
        "id": d.id,
        "component": d.component,
        "topic": d.topic,
        "offset": d.offset,
        "aggregate_id": d.aggregate_id,
        "msg_id": d.msg_id,
        "event_type": d.event_type,
        "attempts": d.attempts,
        "error": d.error,
        "created_at": _when(d.created_at_us) if d.created_at_us else None,
    }


def dead_letters(
    store: Store = DEFAULT_STORE,
    component: Annotated[str | None, typer.Option("--component", help="one component's")] = None,
    broker: Annotated[
        str | None, typer.Option("--broker", help="also list this broker's dead-letter queues")
    ] = None,
    as_json: Json = False,
) -> None:
    """List open dead letters."""
    run(_dead_letters(store, component, broker, as_json))


async def _dead_letters(
    store: str, component: str | None, broker: str | None, as_json: bool
) -> None:
    async with open_admin(store) as admin:
        letters = await admin.collectors.dead_letters(component)
        names = await admin.components()
    if broker:  # the broker's dead-letter queues too (adapters that have them)
        letters.extend(await _broker_dead_letters(broker, [component] if component else names))
    if as_json:
        print_json([letter_json(d) for d in letters])
        return
    table(
        f"dead letters: {len(letters)}",
        ["id", "component", "topic", "offset", "aggregate", "type", "attempts", "error"],
        [
            (d.id, d.component, d.topic, d.offset, d.aggregate_id, d.event_type, d.attempts,
             d.error[:60])
            for d in letters
        ],
    )  # fmt: skip


async def _broker_dead_letters(url: str, groups: list[str]) -> list[Any]:
    from ..broker import DeadLetterQueues, open_broker

    broker = open_broker(url)
    if not isinstance(broker, DeadLetterQueues):
        raise ReventlessError(f"broker {url.split('://')[0]} has no dead-letter queues to list")
    await broker.connect()
    try:
        found: list[Any] = []
        for group in groups:
            found.extend(await broker.dead_letters(group))
        return found
    finally:
        await broker.close()


def redrive(
    component: Annotated[str, typer.Argument(help="the component whose dead letters to retry")],
    app: AppSpec,
    store: FactoryStore = None,
    aggregate: Annotated[
        str | None, typer.Option("--aggregate", help="only this aggregate's letters")
    ] = None,
) -> None:
    """Retry a component's dead letters, per aggregate in offset order (needs the app).

    Progress on stderr; exit status 1 when some stay parked."""
    run(_redrive(component, app, store, aggregate))


async def _redrive(component: str, spec: str, store: str | None, aggregate: str | None) -> int:
    app = load_app(spec, store)
    if component not in app.components:
        known = ", ".join(app.components) or "none"
        raise UsageError(f"--app {spec} collects no {component!r} (it collects: {known})")
    async with app:
        before = await _open_letters(app, component, aggregate)
        if not before:  # nothing to show progress of (the broker's queues are moved back)
            report = await app.redrive(component, aggregate)
        else:
            with meter(f"redrive {component}", len(before), "letters") as m:
                report = await _redrive_shown(app, component, aggregate, before, m)
    print(f"redriven: {report.redriven}  still parked: {report.still_parked}")
    return 0 if report.still_parked == 0 else 1


async def _redrive_shown(
    app: App, component: str, aggregate: str | None, before: set[int], m: Meter
) -> RedriveReport:
    """``app.redrive``, the meter following the store's open letters as they resolve."""
    work = asyncio.create_task(app.redrive(component, aggregate))
    done = 0
    while not work.done():
        await asyncio.wait([work], timeout=REDRIVE_POLL)
        with contextlib.suppress(ReventlessError):
            resolved = len(before - await _open_letters(app, component, aggregate))
            m.advance(resolved - done)
            done = resolved
    report = await work
    m.advance(max(report.redriven - done, 0))
    return report


async def _open_letters(app: App, component: str, aggregate: str | None) -> set[int]:
    letters = await app.store.collectors.dead_letters(component)
    return {d.id for d in letters if aggregate is None or d.aggregate_id == aggregate}


def _when(us: int) -> str:
    from ..scheduling import from_us

    return from_us(us).isoformat(timespec="seconds")


class ScheduleStatus(StrEnum):
    """``schedules --status``."""

    pending = "pending"
    dead = "dead"


def schedule_json(s: StoredSchedule) -> dict[str, Any]:
    """A scheduled command with stable keys."""
    return {
        "id": s.id,
        "status": s.status,
        "due_at": _when(s.due_at_us),
        "topic": s.topic,
        "aggregate_id": s.aggregate_id,
        "command_type": s.command_type,
        "attempts": s.attempts,
        "error": s.error,
    }


def schedules(
    store: Store = DEFAULT_STORE,
    status: Annotated[ScheduleStatus | None, typer.Option("--status", help="default both")] = None,
    limit: Annotated[int, typer.Option("--limit", parser=COUNT, help="per status")] = 1000,
    as_json: Json = False,
) -> None:
    """List pending and dead-lettered scheduled commands, each earliest first."""
    run(_schedules(store, status, limit, as_json))


async def _schedules(store: str, status: ScheduleStatus | None, limit: int, as_json: bool) -> None:
    wanted: Sequence[Any] = ["pending", "dead"] if status is None else [status.value]
    async with open_admin(store) as admin:
        found = [s for st in wanted for s in await admin.schedules.find(st, limit=limit)]
    if as_json:
        print_json([schedule_json(s) for s in found])
        return
    table(
        f"scheduled commands: {len(found)}",
        ["id", "status", "due", "topic", "aggregate", "command", "attempts", "error"],
        [
            (s.id, s.status, _when(s.due_at_us), s.topic, s.aggregate_id, s.command_type,
             s.attempts, (s.error or "")[:60])
            for s in found
        ],
    )  # fmt: skip


def redrive_schedules(
    ids: Annotated[
        list[str] | None, typer.Argument(metavar="[ID]...", help="schedule ids (default: all dead)")
    ] = None,
    store: Store = DEFAULT_STORE,
) -> None:
    """Make dead-lettered schedules due now (a running App's scheduler fires them)."""
    run(_redrive_schedules(ids or [], store))


async def _redrive_schedules(ids: list[str], store: str) -> None:
    from ..ids import now_us

    async with open_admin(store) as admin:
        n = await admin.schedules.redrive(ids or None, now_us())
    print(f"redriven: {n}")
