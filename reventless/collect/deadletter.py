"""Dead letters: events a component gave up on, parked per aggregate until redriven.

The records live in the store (``CollectorStore.dead_letters``); the values are
``reventless.deadletter``'s. Redrive retries each aggregate's letters in offset order
through the collector's public API, stopping an aggregate at its first failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..deadletter import DeadLetter, RedriveReport
from ..decode import envelope_of, opened
from ..errors import Rejected

if TYPE_CHECKING:
    from .collector import Collector

__all__ = ["DeadLetter", "RedriveReport", "error_text", "redrive"]


def error_text(exc: BaseException) -> str:
    """How a dead letter records ``exc``: a rejection's code and detail, else its type
    and message."""
    if isinstance(exc, Rejected):
        return f"Rejected {exc.code}: {exc.detail}"
    return f"{type(exc).__name__}: {exc}"


async def redrive(collector: Collector, aggregate_id: str | None) -> RedriveReport:
    """``Collector.redrive``'s work (the caller holds the collector's lock): each
    aggregate's letters in offset order, stopping at its first failure."""
    c, letters = collector, collector.store.collectors
    groups: dict[tuple[str, str | None], list[DeadLetter]] = {}
    for dl in await c.dead_letters():
        if aggregate_id is None or dl.aggregate_id == aggregate_id:
            groups.setdefault((dl.topic, dl.aggregate_id), []).append(dl)
    ok = stuck = 0
    for (topic, agg), items in groups.items():
        schema = c.topics[topic].schema
        for dl in items:
            rows = await opened(c.store, schema, await c.store.read(topic, dl.offset, 1))
            ev = envelope_of(schema, topic, rows[0])
            try:
                await c.redo(ev)
            except Exception as exc:
                await letters.retry_failed(dl.id, error_text(exc))
                stuck += 1
                break
            await letters.resolve(dl.id)
            ok += 1
        else:
            if agg is not None:
                c.unpark(topic, agg)
    return RedriveReport(ok, stuck)
