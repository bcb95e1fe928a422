"""The receive loop behind ``SnsSqsBroker.subscribe``: one per (group queue, process).

It long-polls up to 10 messages, hands each message group's run (one topic partition,
in order) to the member that owns it, deletes what was handled (DeleteMessageBatch),
keeps the rest invisible while handlers run (ChangeMessageVisibilityBatch) and, when a
run fails, releases the failed message and the rest of its run after a backoff; a
message that fails on its ``max_receive``-th receive goes to the dead-letter queue with
its component and error. The other runs of the same receive are not re-run.

A pump knows its broker only through the ``PumpSession`` the broker hands it (this module
does not import the broker or its queue operations).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from reventless import telemetry
from reventless.broker import Handler, Message, wanted
from reventless.errors import BrokerError

from . import codec
from .options import SnsSqsOptions

log = logging.getLogger("reventless.broker.aws")

#: How long ``close`` lets a running handler finish before cancelling it.
_CLOSE_GRACE = 10.0


@dataclass(eq=False, slots=True)
class Member:
    """One subscriber of a pump's group in this process (a ``subscribe`` call)."""

    handler: Handler
    partitions: frozenset[int] | None = None


@dataclass(eq=False, slots=True)
class Delivery:
    """One received SQS message and what it carries."""

    raw: dict[str, Any]
    message: Message

    @property
    def receipt(self) -> str:
        return str(self.raw["ReceiptHandle"])

    @property
    def receives(self) -> int:
        return int(self.raw.get("Attributes", {}).get("ApproximateReceiveCount", "1"))


def as_dict(raw: Any) -> dict[str, Any]:
    """A received SQS message as a plain dict."""
    return dict(raw)


def error_text(exc: BaseException) -> str:
    """The error recorded with a dead letter."""
    return f"{type(exc).__name__}: {exc}"[:1000]


@dataclass(frozen=True, slots=True)
class PumpSession:
    """What a receive loop may ask of its broker; the broker builds one for its pumps.
    The batch calls take a queue URL and receipt handles (any number: they go in tens)."""

    options: SnsSqsOptions
    #: Long-poll a queue: up to ``batch`` messages (as dicts), waiting up to ``wait`` s.
    receive: Callable[[str], Awaitable[list[dict[str, Any]]]]
    #: DeleteMessageBatch (failures are logged: the messages come again).
    delete: Callable[[str, list[str]], Awaitable[None]]
    #: ChangeMessageVisibilityBatch to the given seconds (``BrokerError`` on failure).
    change_visibility: Callable[[str, list[str], int], Awaitable[None]]
    #: Send (raw message, error, group) to a dead-letter queue with the error attached.
    to_dlq: Callable[[str, list[tuple[dict[str, Any], str, str]]], Awaitable[None]]
    #: Count a message dropped as a repeat (the broker's ``duplicates_dropped``).
    count_duplicate: Callable[[], None]
    #: The pump's last member left: the broker forgets the pump and stops it.
    release: Callable[[Pump], Awaitable[None]]


@dataclass(eq=False)
class Pump:
    """The receive loop of one group's queue in this process."""

    session: PumpSession
    group: str
    queue_url: str
    dlq_url: str
    members: list[Member] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    busy: bool = False
    stopping: bool = False
    _seen: OrderedDict[str, float] = field(default_factory=OrderedDict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def start(self) -> None:
        name = f"rv-sqs-{self.group}"
        self.task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def leave(self, member: Member) -> None:
        """``member`` unsubscribed; the last one to leave hands the pump back (stopping)."""
        if member in self.members:
            self.members.remove(member)
        if not self.members:
            await self.session.release(self)

    async def stop(self) -> None:
        """Stop receiving. A receive in flight is let finish (at most ``wait`` seconds) and
        what it got is released at once, so it is not hidden from the next consumer for a
        visibility timeout; a running handler may finish (bounded)."""
        self.stopping = True
        self._stop.set()
        task = self.task
        if task is not None and not task.done():
            grace = _CLOSE_GRACE if self.busy else self.session.options.wait + 2.0
            await asyncio.wait({task}, timeout=grace)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # not wait_for: 3.11's can eat a cancel
                await self._stop.wait()

    async def _run(self) -> None:
        errors = 0
        o = self.session.options
        while not self.stopping:
            try:
                raws = await self.session.receive(self.queue_url)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                errors += 1
                delay = min(float(o.max_backoff), 0.1 * 2 ** min(errors, 10))
                level = logging.WARNING if errors in (1, 10) or errors % 100 == 0 else logging.DEBUG
                log.log(
                    level,
                    "group %s: receive failed %d time(s), retrying in %.1fs: %r",
                    self.group,
                    errors,
                    delay,
                    exc,
                )
                await self._pause(delay)
                continue
            if errors:
                log.info(
                    "group %s: receiving again", self.group, extra=telemetry.fields(self.group)
                )
                errors = 0
            if raws and self.stopping:
                receipts = [str(r["ReceiptHandle"]) for r in raws]
                with contextlib.suppress(BrokerError):
                    await self.session.change_visibility(self.queue_url, receipts, 0)
                return
            if raws:
                await self._dispatch(raws)

    def _is_duplicate(self, msg_id: str) -> bool:
        window = self.session.options.dedup_window
        now = time.monotonic()
        while self._seen:
            oldest, at = next(iter(self._seen.items()))
            if now - at <= window and len(self._seen) <= 100_000:
                break
            self._seen.pop(oldest)
        return msg_id in self._seen

    async def _dispatch(self, raws: list[dict[str, Any]]) -> None:
        b = self.session
        members = list(self.members)
        done: list[Delivery] = []
        poison: list[tuple[dict[str, Any], str]] = []
        runs: dict[tuple[int, str], list[Delivery]] = {}
        for raw in raws:
            try:
                d = Delivery(raw, codec.to_message(raw))
            except BrokerError as exc:
                poison.append((raw, str(exc)))
                continue
            msg = d.message
            if self._is_duplicate(msg.msg_id):
                b.count_duplicate()
                done.append(d)
                continue
            slots = [i for i, m in enumerate(members) if wanted(m.partitions, msg)]
            if not slots:  # another member's partition (collector groups), or no member
                if not members:
                    await b.change_visibility(self.queue_url, [d.receipt], 0)
                else:
                    done.append(d)
                continue
            slot = slots[zlib.crc32(msg.key.encode()) % len(slots)]
            runs.setdefault((slot, b.options.group_id(msg.topic, msg.key)), []).append(d)
        if poison:
            await self._dead_letter_raw(poison)
        failed: list[tuple[list[Delivery], BaseException]] = []
        if runs:
            self.busy = True
            inflight = [d.receipt for run in runs.values() for d in run]
            keepalive = asyncio.get_running_loop().create_task(self._keep_alive(inflight))
            try:
                for (slot, _), run in runs.items():
                    ok, rest, error = await self._handle(members[slot].handler, run)
                    done.extend(ok)
                    if rest and error is not None:
                        failed.append((rest, error))
            finally:
                keepalive.cancel()
                await asyncio.gather(keepalive, return_exceptions=True)
                self.busy = False
        if done:
            await b.delete(self.queue_url, [d.receipt for d in done])
            now = time.monotonic()
            for d in done:
                self._seen[d.message.msg_id] = now
        for rest, error in failed:
            await self._reject(rest, error)

    async def _handle(
        self, handler: Handler, run: list[Delivery]
    ) -> tuple[list[Delivery], list[Delivery], BaseException | None]:
        """Hand a run to its handler; on failure find the failing message, so the messages
        before it count as handled. Returns (handled, failed-and-after, error)."""
        try:
            await handler([d.message for d in run])
            return run, [], None
        except asyncio.CancelledError:
            if self.stopping:
                raise
            return [], run, asyncio.CancelledError()
        except Exception as exc:
            first_error: BaseException = exc
        if len(run) == 1:
            return [], run, first_error
        for i, d in enumerate(run):
            try:
                await handler([d.message])
            except asyncio.CancelledError:
                if self.stopping:
                    raise
                return run[:i], run[i:], first_error
            except Exception as again:
                return run[:i], run[i:], again
        return run, [], None  # a transient failure: every message went through one by one

    async def _reject(self, rest: list[Delivery], exc: BaseException) -> None:
        """The first message of ``rest`` failed: dead-letter it on its last receive (the rest
        then comes again at once), else release them all after a backoff."""
        b, o = self.session, self.session.options
        head = rest[0]
        if head.receives >= o.max_receive:
            await b.to_dlq(self.dlq_url, [(head.raw, error_text(exc), self.group)])
            await b.delete(self.queue_url, [head.receipt])
            log.error(
                "group %s: message %s failed on receive %d of %d: moved to the dead-letter "
                "queue (the collector reads those events from the store): %s",
                self.group,
                head.message.msg_id,
                head.receives,
                o.max_receive,
                error_text(exc),
                extra=telemetry.fields(self.group, topic=head.message.topic),
            )
            if rest[1:]:
                await b.change_visibility(self.queue_url, [d.receipt for d in rest[1:]], 0)
            return
        delay = min(o.max_backoff, o.backoff * 2 ** max(0, head.receives - 1))
        await b.change_visibility(self.queue_url, [d.receipt for d in rest], delay)
        log.warning(
            "group %s: handler failed on receive %d of message %s (%d held back), retry in %ds: %s",
            self.group,
            head.receives,
            head.message.msg_id,
            len(rest) - 1,
            delay,
            error_text(exc),
            extra=telemetry.fields(self.group, topic=head.message.topic),
        )

    async def _dead_letter_raw(self, poison: list[tuple[dict[str, Any], str]]) -> None:
        """Messages that are not reventless messages go to the dead-letter queue at once."""
        b = self.session
        await b.to_dlq(self.dlq_url, [(raw, err, self.group) for raw, err in poison])
        await b.delete(self.queue_url, [str(raw["ReceiptHandle"]) for raw, _ in poison])
        log.error(
            "group %s: %d malformed message(s) dead-lettered",
            self.group,
            len(poison),
            extra=telemetry.fields(self.group),
        )

    async def _keep_alive(self, receipts: list[str]) -> None:
        """While handlers run, keep the messages invisible (ChangeMessageVisibilityBatch)."""
        o = self.session.options
        period = max(0.5, o.visibility / 3)
        while True:
            await asyncio.sleep(period)
            with contextlib.suppress(BrokerError):
                await self.session.change_visibility(self.queue_url, receipts, o.visibility)
