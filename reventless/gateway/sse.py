"""The Server-Sent Events stream of one subscription.

Each event is sent as ``id: <offset>`` / ``event: event`` / ``data: <json>``, so a client
that reconnects with ``Last-Event-ID`` resumes right after the last event it received
(nothing lost, nothing twice). Control events carry no id (they do not move the client's
position): ``paused`` / ``resumed``; ``backpressure``; ``resnapshot`` (the cursor fell
behind the retained horizon; the stream ends) and ``closed`` (``reason``: ``closed``, the
subscription was closed, or ``shutdown``, the gateway is stopping: reconnect). A comment
line keeps idle connections open.

The backpressure rule: the stream's lag is the head minus its position (the offset before
the next one it reads: ``Last-Event-ID``/``from`` - 1 when it opens, then the end of each
page sent). It is checked when the stream opens, before any event, and after each page;
whenever it exceeds ``backpressure_lag`` a ``backpressure`` frame
``{"backlog": lag, "head": head}`` follows. Offsets count every event of the topic, also
those a predicate, type filter or tenant skips.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from .. import telemetry
from ..subscribe import ResnapshotRequiredError, SubscriptionNotFoundError, Subscriptions
from ..subscribe.encode import EncodedEvents


def frame(data: Any, *, event: str, id: int | None = None) -> str:
    """One SSE frame (``data`` as one line of JSON)."""
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def event_frames(encoded: EncodedEvents) -> str:
    """The frames of a page's events (their JSON as encoded, ``id`` their offset)."""
    return "".join(
        f"id: {o}\nevent: event\ndata: {t}\n\n"
        for o, t in zip(encoded.offsets, encoded.texts, strict=True)
    )


@telemetry.sse
async def stream(
    subs: Subscriptions,
    sub_id: str,
    *,
    tenant: str | None,
    start: int,
    batch: int,
    columns: Sequence[str] | None,
    types: Sequence[str] | None,
    wait: Callable[[float], Any],
    poll_interval: float,
    keepalive: float,
    backpressure_lag: int,
    stopped: Callable[[], bool] = lambda: False,
) -> AsyncIterator[str]:
    """Frames from offset ``start`` on, until the subscription closes, the client leaves
    or ``stopped()`` (the gateway shuts down; checked after every page and wait)."""
    cursor, paused, quiet_since, opening = start, False, time.monotonic(), True
    yield "retry: 1000\n\n"
    while True:
        if stopped():
            yield frame({"id": sub_id, "reason": "shutdown"}, event="closed")
            return
        try:
            page = await subs.poll(
                sub_id, from_offset=cursor, limit=batch, tenant=tenant, columns=columns, types=types
            )
        except ResnapshotRequiredError as exc:
            yield frame(
                {"horizon": exc.horizon, "cursor": exc.cursor, "resume_from": exc.horizon + 1},
                event="resnapshot",
            )
            return
        except SubscriptionNotFoundError:
            yield frame({"id": sub_id, "reason": "closed"}, event="closed")
            return
        if opening and page.head - (cursor - 1) > backpressure_lag:
            yield frame(
                {"backlog": page.head - (cursor - 1), "head": page.head}, event="backpressure"
            )
        opening = False
        if page.state == "paused":
            if not paused:
                yield frame({"lag": page.lag, "head": page.head}, event="paused")
                paused = True
            await wait(poll_interval)
            continue
        if paused:
            yield frame({"lag": page.lag, "head": page.head}, event="resumed")
            paused = False
        if page.encoded:  # one write per page, not per event
            yield event_frames(page.encoded)
        cursor = page.next_offset
        backlog = page.head - (cursor - 1)
        if backlog > backpressure_lag:
            yield frame({"backlog": backlog, "head": page.head}, event="backpressure")
        if page.encoded or backlog > 0:
            quiet_since = time.monotonic()
            await asyncio.sleep(0)
            continue
        if time.monotonic() - quiet_since >= keepalive:
            yield ": keepalive\n\n"
            quiet_since = time.monotonic()
        await wait(min(poll_interval, keepalive))
