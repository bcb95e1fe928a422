"""``reventless replay``: run a side effect's (or a mapper's) handlers again over the
events of its topics from an offset, leaving its checkpoint where it is.

The use: a webhook receiver or mail relay lost what it was sent, and the events from
offset N must be sent again. Events are read from the store in offset order per topic,
through the component's own ``where=`` filter and handler dispatch, and handed to
``Collector.redo`` (the path ``redrive`` takes) while its deliveries are held. A side
effect runs again with the same idempotency key; a mapper's commands keep their
deterministic ids, so only commands that never landed are executed. A read model is not
replayed (its rows would go back in time): ``reventless rebuild`` rebuilds it. The first
handler failure stops the replay (exit 1) and names the offset to resume from.

Example::

    reventless replay order_confirmations --app examples.shop.model:app --from 100
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .letters import AppSpec, FactoryStore
from .loading import load_app
from .output import Meter, meter
from .params import OFFSET
from .run import UsageError, one_line, run

if TYPE_CHECKING:
    from ..collect import Collector

#: Events read per page (one ``exclusive`` hold of the collector each).
PAGE = 500


@dataclass
class Replayed:
    """How far a replay went: events handled, and the failure that stopped it."""

    handled: int = 0
    failed_at: tuple[str, int] | None = None
    error: str = ""


def replay(
    component: Annotated[str, typer.Argument(help="the side effect or mapper to run again")],
    app: AppSpec,
    from_offset: Annotated[
        int, typer.Option("--from", parser=OFFSET, help="first offset (of each of its topics)")
    ],
    to_offset: Annotated[
        int | None, typer.Option("--to", parser=OFFSET, help="last offset (default: the head)")
    ] = None,
    store: FactoryStore = None,
) -> None:
    """Run a side effect's (or mapper's) handlers again from an offset (needs the app).

    Its checkpoint stays where it is; a read model is rebuilt instead (reventless
    rebuild). Progress on stderr; exit status 1 when a handler fails (the line names the
    offset to resume from)."""
    run(_replay(component, app, store, from_offset, to_offset))


async def _replay(
    component: str, spec: str, store: str | None, first: int, last: int | None
) -> int:
    from ..collect import ReadModel

    if last is not None and last < first:
        raise UsageError(f"--to {last} is before --from {first}")
    app = load_app(spec, store)
    declared = app.components.get(component)
    if declared is None:
        known = ", ".join(app.components) or "none"
        raise UsageError(f"--app {spec} collects no {component!r} (it collects: {known})")
    if isinstance(declared, ReadModel):
        raise UsageError(
            f"{component} is a read model: rebuild it instead (reventless rebuild MODULE:"
            f"{component} --app {spec})"
        )
    async with app:
        collector = app.collector(component)
        heads = {t: await collector.store.head(t) for t in collector.topics}
        total = sum(max(min(h, last or h) - first + 1, 0) for h in heads.values())
        with meter(f"replay {component}", total, "events") as m:
            done = Replayed()
            for topic, head in heads.items():
                upto = head if last is None else min(head, last)
                if not await _replay_topic(collector, topic, first, upto, m, done):
                    break
    if done.failed_at is not None:
        topic, offset = done.failed_at
        print(
            f"replayed: {done.handled}; stopped at {topic} offset {offset}: {done.error} "
            f"(resume with --from {offset})"
        )
        return 1
    print(f"replayed: {done.handled}")
    return 0


async def _replay_topic(
    collector: Collector, topic: str, first: int, upto: int, m: Meter, done: Replayed
) -> bool:
    """Redo ``topic``'s events ``first..upto`` that the component handles; False when a
    handler failed (``done`` says where)."""
    from ..codec import OFFSET_AT, TYPE_AT
    from ..decode import envelope_of, opened

    handlers = collector.dispatch.get(topic, {})
    keep = collector.filters.get(topic)
    schema = collector.topics[topic].schema
    offset = first
    while offset <= upto:
        rows = await collector.store.read(topic, offset, PAGE, upto=upto)
        if not rows:
            break
        scanned = len(rows)
        offset = rows[-1][OFFSET_AT] + 1
        wanted: list[Any] = rows if keep is None else keep.rows(rows)
        if "*" not in handlers:
            wanted = [r for r in wanted if r[TYPE_AT] in handlers]
        async with collector.exclusive():  # live deliveries wait for this page
            for row in await opened(collector.store, schema, wanted):
                ev = envelope_of(schema, topic, row)
                try:
                    await collector.redo(ev)
                except Exception as exc:
                    done.failed_at = (topic, ev.offset)
                    done.error = one_line(f"{type(exc).__name__}: {exc}")
                    return False
                done.handled += 1
        m.advance(scanned)
    return True
