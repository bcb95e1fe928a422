"""The fetch loop behind ``JetStreamBroker.subscribe``: one per durable consumer (a
(group, topic), or a (group, topic, subject partition) of a collector-group member) per
process.

It pulls batches from the durable consumer, hands them to the group's members by key,
acks after the handler returned (after the collector's checkpoint committed), naks with
a growing delay on failure and terminates a message on its last delivery.

A pump knows its broker only through the ``PumpSession`` the broker hands it (this module
does not import the broker): what it needs to bind its consumer, to decode a message, and
to hand itself back when its last member leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from reventless import telemetry
from reventless.broker import Handler, Message, wanted
from reventless.errors import BrokerError

from .options import NatsOptions

log = logging.getLogger("reventless.broker.nats")

#: How long ``close`` lets a running handler finish before cancelling it.
_CLOSE_GRACE = 10.0
#: Seconds between fetches while the consumer has no leader (a cluster electing one).
_ELECTION_RETRY = 0.25


def _backoff(base: float, cap: float, attempt: int) -> float:
    return float(min(cap, base * 2 ** max(0, min(attempt - 1, 16))))


@dataclass(eq=False, slots=True)
class Member:
    """One subscriber of a pump's group in this process (a ``subscribe`` call)."""

    handler: Handler
    partitions: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class PumpSession:
    """What a fetch loop may ask of its broker; the broker builds one for its pumps."""

    options: NatsOptions
    #: Declare ``topic``'s stream and ensure the durable consumer of (group, topic, subject
    #: partition); returns the JetStream context to bind it with.
    prepare: Callable[[str, str, int | None], Awaitable[JetStreamContext]]
    #: The stream or consumer of ``topic`` may be gone: declare it again when next used.
    redeclare: Callable[[str], None]
    #: A fetched message of ``topic`` as a reventless ``Message``.
    to_message: Callable[[str, Msg], Message]
    #: The pump's last member left: the broker forgets the pump and stops it.
    release: Callable[[Pump], Awaitable[None]]
    #: Whether the durable consumer of (group, topic, subject partition) exists, as the
    #: server lists it (None: no answer).
    exists: Callable[[str, str, int | None], Awaitable[bool | None]]


@dataclass(eq=False, slots=True)
class _Delivery:
    raw: Msg
    message: Message


@dataclass(eq=False)
class Pump:
    """The fetch loop of one (group, topic) durable consumer in this process."""

    session: PumpSession
    group: str
    topic: str
    #: The subject partition this pump's consumer filters on (None: all of them).
    part: int | None = None
    members: list[Member] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    busy: bool = False
    stopping: bool = False
    _psub: JetStreamContext.PullSubscription | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def options(self) -> NatsOptions:
        return self.session.options

    def start(self) -> None:
        name = f"rv-nats-{self.group}-{self.topic}-{'all' if self.part is None else self.part}"
        self.task = asyncio.get_running_loop().create_task(self._run(), name=name)

    async def leave(self, member: Member) -> None:
        """``member`` unsubscribed; the last one to leave hands the pump back (stopped)."""
        if member in self.members:
            self.members.remove(member)
        if not self.members:
            await self.session.release(self)

    async def stop(self) -> None:
        """Stop fetching; a running handler may finish (bounded), then unsubscribe."""
        self.stopping = True
        self._stop.set()
        task = self.task
        if task is not None and not task.done():
            if not self.busy:
                task.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_GRACE)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._unsubscribe()

    async def _unsubscribe(self) -> None:
        psub, self._psub = self._psub, None
        if psub is not None:
            with contextlib.suppress(Exception):
                await psub.unsubscribe()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up at once when the pump stops."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):  # not wait_for: 3.11's can eat a cancel
                await self._stop.wait()

    async def setup(self) -> None:
        """Bind the durable consumer (declaring stream and consumer first); errors reach
        the caller (``subscribe``: a bad config or no server)."""
        js = await self.session.prepare(self.group, self.topic, self.part)
        stream = self.options.stream_name(self.topic)
        durable = self.options.durable_name(self.group, self.part)
        await self._unsubscribe()
        self._psub = await js.pull_subscribe_bind(consumer=durable, stream=stream)

    async def _run(self) -> None:
        errors = 0
        while not self.stopping:
            try:
                if self._psub is None:
                    await self.setup()
                batch = await self._fetch()
            except asyncio.CancelledError:
                raise
            except nats.errors.TimeoutError:
                continue  # idle (or disconnected: the client reconnects meanwhile)
            except Exception as exc:
                errors += 1
                await self._pause(await self._recover(exc, errors))
                continue
            if errors:
                log.info(
                    "group %s topic %s: fetching again",
                    self.group,
                    self.topic,
                    extra=telemetry.fields(self.group, topic=self.topic),
                )
                errors = 0
            if batch:
                await self._dispatch(batch)

    async def _recover(self, exc: Exception, errors: int) -> float:
        """After the ``errors``-th failed fetch in a row, make the next one possible;
        returns the seconds to wait before it."""
        delay = _backoff(0.1, self.options.max_backoff, errors)
        if isinstance(exc, nats.js.errors.ServiceUnavailableError) and (
            await self.session.exists(self.group, self.topic, self.part) is not False
        ):
            # No responders, yet the consumer is there: it has no leader until the cluster
            # elects one. The binding stays good; fetch again soon (declaring would wait
            # out API timeouts while the election runs).
            delay = min(delay, _ELECTION_RETRY)
        elif isinstance(exc, nats.js.errors.APIError | BrokerError):
            # The stream or consumer may be gone (a server that lost its state): declare
            # both again before the next fetch.
            self.session.redeclare(self.topic)
            await self._unsubscribe()
        level = logging.WARNING if errors in (1, 10) or errors % 100 == 0 else logging.DEBUG
        log.log(
            level,
            "group %s topic %s: fetch failed %d time(s), retrying in %.1fs: %r",
            self.group,
            self.topic,
            errors,
            delay,
            exc,
        )
        return delay

    async def _fetch(self) -> list[Msg]:
        psub = self._psub
        assert psub is not None
        o = self.options
        # A lingering fetch of one returns as soon as a message is there; the rest of the
        # batch is then fetched from what the consumer already has pending.
        got = await psub.fetch(1, timeout=o.fetch_wait)
        more = got[-1].metadata.num_pending if got else 0
        if more > 0 and o.batch > 1:
            with contextlib.suppress(nats.errors.TimeoutError):
                got += await psub.fetch(min(o.batch - 1, more), timeout=min(1.0, o.fetch_wait))
        return got

    async def _dispatch(self, raws: list[Msg]) -> None:
        members = list(self.members)
        if not members:
            for raw in raws:
                await _settle(raw.nak())
            return
        parts: dict[int, list[_Delivery]] = {}
        for raw in raws:
            msg = self.session.to_message(self.topic, raw)
            slots = [i for i, m in enumerate(members) if wanted(m.partitions, msg)]
            if not slots:  # another member's partition (collector groups): not ours
                await _settle(raw.ack())
                continue
            slot = slots[zlib.crc32(msg.key.encode()) % len(slots)]
            parts.setdefault(slot, []).append(_Delivery(raw, msg))
        if not parts:
            return
        self.busy = True
        keepalive = asyncio.get_running_loop().create_task(self._keep_alive(raws))
        try:
            results = await asyncio.gather(
                *(members[slot].handler([d.message for d in part]) for slot, part in parts.items()),
                return_exceptions=True,
            )
        finally:
            keepalive.cancel()
            self.busy = False
        delay = 0.0
        for part, result in zip(parts.values(), results, strict=True):
            if isinstance(result, asyncio.CancelledError) and self.stopping:
                raise result
            if isinstance(result, BaseException):
                delay = max(delay, await self._reject(part, result))
            else:
                for d in part:
                    await _settle(d.raw.ack())
        if delay:
            # Redeliveries come before new messages once their delay is over: waiting it
            # out keeps stream order (and is the backoff of a failing handler).
            await self._pause(delay)

    async def _reject(self, part: list[_Delivery], exc: BaseException) -> float:
        """Nak each message with a backoff delay, or term it on its last delivery."""
        o = self.options
        last: list[_Delivery] = []
        again: list[_Delivery] = []
        for d in part:
            done = o.max_deliver != -1 and d.raw.metadata.num_delivered >= o.max_deliver
            (last if done else again).append(d)
        for d in last:
            await _settle(d.raw.term())
        if last:
            log.error(
                "group %s topic %s: gave up on %d message(s) after %d deliveries "
                "(the consumer catches up from the store): %r",
                self.group,
                self.topic,
                len(last),
                o.max_deliver,
                exc,
                extra=telemetry.fields(self.group, topic=self.topic),
            )
        if not again:
            return 0.0
        deliveries = max(d.raw.metadata.num_delivered for d in again)
        delay = _backoff(o.backoff, o.max_backoff, deliveries)
        for d in again:
            await _settle(d.raw.nak(delay=delay))
        log.warning(
            "group %s topic %s: handler failed on delivery %d of %d message(s), "
            "redelivery in %.2fs: %r",
            self.group,
            self.topic,
            deliveries,
            len(again),
            delay,
            exc,
            extra=telemetry.fields(self.group, topic=self.topic),
        )
        return delay

    async def _keep_alive(self, raws: list[Msg]) -> None:
        """While handlers run, tell the server the messages are in progress."""
        while True:
            await asyncio.sleep(self.options.ack_wait / 3)
            for raw in raws:
                await _settle(raw.in_progress())


async def _settle(op: Awaitable[None]) -> None:
    """Send an ack/nak/term/progress; a lost one only means a harmless redelivery."""
    try:
        await op
    except Exception as exc:
        log.debug("could not send an ack to NATS: %r", exc)
