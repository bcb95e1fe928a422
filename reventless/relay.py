"""The outbox relay: publishes committed events to the broker, after the commit.

The store is the outbox. The relay remembers, per topic, the last offset it
published (persisted lazily in ``rv_relay``: after a crash it re-publishes a
little, which is harmless because message ids are stable and collectors are
idempotent). A broker failure is logged and retried; commands never see it.

Several processes share one store: each relay publishes its own commits at once
(and, to keep offset order, other processes' rows between them). Rows that only
other processes committed are left to their relays: this one adopts the shared
``rv_relay`` position, and publishes such rows itself only once they have stayed
unpublished for ``orphan_after`` seconds (their writer died). So a process that
only reads (a projector service) does not re-publish the log.

Rows that no consumer would receive (a ``SubscriberAware`` broker, the in-memory one, with
no subscriber of the topic) are passed over without being encoded: their position moves
on and the partitions' ``rv-prev`` chain includes them, so a consumer that subscribes
later (and catches up from the store first, as collectors do) sees no gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from functools import partial

from . import telemetry
from .broker import Broker, Message, SubscriberAware, capabilities_of
from .codec import OFFSET_AT, PARTITION_AT, TRACE_AT, TYPE_AT
from .codec.ipc import decode_batch, encode_batch
from .errors import ReventlessError
from .store.append import AppendResult, StoredRow
from .store.port import Store
from .topicdef import TopicDef

log = logging.getLogger("reventless.relay")

_PAGE = 1000
_MAX_BUFFER = 50_000


def _traces(rows: list[StoredRow]) -> list[str | None]:
    return [r[TRACE_AT] for r in rows]


def message_for(topic: TopicDef, partition: int, rows: list[StoredRow], prev: int) -> Message:
    """One broker message: rows of one partition of ``topic``, in offset order.

    ``rv-prev`` is the partition's previous offset (0: none), so a consumer can tell a
    gap (it has not seen ``prev`` yet) from a duplicate; the key is the partition.
    ``rv-types`` names the event types in the message (brokers may filter on it). The
    payload is compressed as the topic says (``TopicDef.compression``).
    """
    first, last = rows[0][OFFSET_AT], rows[-1][OFFSET_AT]
    headers = {
        "rv-first": str(first),
        "rv-last": str(last),
        "rv-count": str(len(rows)),
        "rv-prev": str(prev),
    }
    types = sorted({str(r[TYPE_AT]) for r in rows if r[TYPE_AT]})
    if types:
        headers["rv-types"] = ",".join(types)
    return Message(
        topic=topic.name,
        data=encode_batch(topic.schema.to_arrow(rows), topic.compression),
        msg_id=f"{topic.name}:{partition}:{first}-{last}",
        headers=headers,
        key=str(partition),
    )


def fitted(
    topic: TopicDef, partition: int, rows: list[StoredRow], prev: int, limit: int | None
) -> list[Message]:
    """``message_for``, split in halves until each payload fits ``limit`` bytes (the
    broker's ``max_message_bytes``); the pieces chain through ``rv-prev``. A single event
    larger than the limit cannot be sent: it is logged and left out, and collectors read
    it from the store (they see the gap in ``rv-prev``)."""
    msg = message_for(topic, partition, rows, prev)
    if limit is None or len(msg.data) <= limit:
        return [msg]
    if len(rows) == 1:
        log.error(
            "event at offset %d of topic %s is %d bytes encoded, over the broker's message "
            "limit of %d: not published (collectors read it from the store)",
            rows[0][OFFSET_AT],
            topic.name,
            len(msg.data),
            limit,
        )
        return []
    half = len(rows) // 2
    return [
        *fitted(topic, partition, rows[:half], prev, limit),
        *fitted(topic, partition, rows[half:], rows[half - 1][OFFSET_AT], limit),
    ]


def messages_for(
    topic: TopicDef, rows: list[StoredRow], last: dict[int, int], limit: int | None = None
) -> list[Message]:
    """Split a contiguous page into per-partition messages (each at most ``limit`` bytes of
    payload, if given); ``last`` tracks each partition's last published offset (updated)."""
    if topic.partitions == 1:
        by_part = {0: rows}
    else:
        by_part = {}
        for r in rows:
            by_part.setdefault(r[PARTITION_AT], []).append(r)
    out = []
    for p, part in by_part.items():
        out.extend(fitted(topic, p, part, last.get(p, 0), limit))
        last[p] = part[-1][OFFSET_AT]
    return out


class Relay:
    """Publishes each topic's committed rows in offset order, from memory or the store."""

    def __init__(
        self,
        store: Store,
        broker: Broker,
        topics: Mapping[str, TopicDef],
        *,
        retry_interval: float = 0.5,
        persist_interval: float = 1.0,
        linger: float = 0.002,
        orphan_after: float = 3.0,
    ) -> None:
        self.store, self.broker, self.topics = store, broker, dict(topics)
        self.retry_interval = retry_interval
        self.persist_interval = persist_interval
        self.linger = linger
        self.orphan_after = orphan_after
        # topic -> (a head committed elsewhere, when first seen unpublished)
        self._foreign: dict[str, tuple[int, float]] = {}
        #: The broker's payload limit per message (its declared ``max_message_bytes``);
        #: larger pages are split to fit.
        self.max_message_bytes = capabilities_of(broker).max_message_bytes
        self.published: dict[str, int] = {}
        self._persisted: dict[str, int] = {}
        self._buffer: dict[str, deque[StoredRow]] = {n: deque() for n in self.topics}
        self._known: dict[str, int] = {}
        self._last: dict[str, dict[int, int]] = {n: {} for n in self.topics}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.failures = 0
        #: Rows passed over because no consumer was subscribed (``SubscriberAware``).
        self.unheard = 0
        # (a runtime-checkable Protocol's isinstance is slow: asked once)
        self._aware: SubscriberAware | None = (
            broker if isinstance(broker, SubscriberAware) else None
        )
        self._publishing = False

    async def start(self) -> None:
        """Load positions (a new topic starts at its head) and start publishing."""
        names = list(self.topics)

        positions = await self.store.relay_positions.start(names)
        self.published = {n: positions[n] for n in names}
        # Rows committed but not published when we start are another (live or dead)
        # process's: left to its relay for ``orphan_after`` seconds.
        self._known = dict(self.published)
        now = asyncio.get_running_loop().time()
        for n, head in (await self.store.heads()).items():
            if n in self._known and head > self._known[n]:
                self._foreign[n] = (head, now)
        lasts = await self.store.partition_heads(names, upto=self.published)
        for (name, p), off in lasts.items():
            if off:
                self._last[name][p] = off
        self._persisted = dict(self.published)
        self.store.commit_listeners.append(self.on_commit)
        telemetry.watch_relay(self)
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def on_commit(self, results: list[AppendResult]) -> None:
        """Called by the store after each group commit with what landed (in offset order)."""
        if len(results) == 1:  # a lone append's (the sequential hot path): no pass below
            res = results[0]
            name = res.topic
            if (
                res.rows
                and name in self.topics
                and self._caught_up(name, res)
                and self._unheard(name)
            ):
                self._pass_over_results(name, results)
                return
        wake = False
        unheard: dict[str, bool] = {}  # per topic, asked once per call (a group's results)
        i, n = 0, len(results)
        while i < n:
            res = results[i]
            i += 1
            name = res.topic
            if name not in self.topics or not res.rows:
                continue
            if self._caught_up(name, res) and self._unheard_once(name, unheard):
                # nothing pending and no one to hear it: passed over here, with no turn
                # of the relay's task, with the results of the same topic right after it
                # (a bulk append's, one per aggregate)
                run = [res]
                while i < n and results[i].topic == name and results[i].rows:
                    if results[i].first_offset != run[-1].last_offset + 1:
                        break
                    run.append(results[i])
                    i += 1
                self._pass_over_results(name, run)
                continue
            buf = self._buffer[name]
            if len(buf) < _MAX_BUFFER:  # beyond that (broker down), re-read the store
                buf.extend(res.rows)
            self._known[name] = max(self._known[name], res.last_offset)
            wake = True
        if wake or not results:
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_persist = loop.time()
        while not self._closing:
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel
                # that stops this loop when it lands as the wait times out or completes
                async with asyncio.timeout(self.persist_interval):
                    await self._wake.wait()
            except TimeoutError:
                # Quiet: look for commits made by other processes sharing the store.
                with contextlib.suppress(ReventlessError):
                    await self._look_around(loop.time())
            if self.linger:
                await asyncio.sleep(self.linger)  # let a few commits share one message
            self._wake.clear()
            ok = await self.publish_pending()
            if loop.time() - last_persist >= self.persist_interval:
                try:  # lazy: a position not recorded now is recorded next time
                    await self._persist()
                except ReventlessError as exc:
                    log.warning("recording the relay's positions failed (will retry): %s", exc)
                last_persist = loop.time()
            if not ok:
                await asyncio.sleep(self.retry_interval)
                self._wake.set()

    async def _look_around(self, now: float) -> None:
        """Adopt what other relays published; take over rows left unpublished too long."""
        shared = await self._shared_positions()
        adopted = []
        for name, pos in shared.items():
            if name in self.published and pos > self.published[name]:
                self.published[name] = self._persisted[name] = pos
                adopted.append(name)
        if adopted:
            lasts = await self.store.partition_heads(adopted, upto=self.published)
            for name in adopted:
                self._last[name] = {}
            for (name, p), off in lasts.items():
                if off:
                    self._last[name][p] = off
        for name, head in (await self.store.heads()).items():
            if name not in self._known or head <= max(self._known[name], self.published[name]):
                self._foreign.pop(name, None)
                continue
            seen = self._foreign.get(name)
            if seen is None or seen[0] > head:
                seen = self._foreign[name] = (head, now)
            if now - seen[1] >= self.orphan_after:  # its writer's relay did not publish it
                self._known[name] = max(self._known[name], seen[0])
                self._foreign.pop(name, None)

    async def _shared_positions(self) -> dict[str, int]:
        return await self.store.relay_positions.shared()

    async def publish_pending(self) -> bool:
        """Publish everything committed and not yet published; False if the broker failed."""
        self._publishing = True
        try:
            return await self._publish_all()
        finally:
            self._publishing = False

    async def _publish_all(self) -> bool:
        for name, topic in self.topics.items():
            try:
                await self._publish_topic(name, topic)
            except (ReventlessError, OSError) as exc:
                self.failures += 1
                log.warning(
                    "publishing %s failed (will retry from the store): %s",
                    name,
                    exc,
                    extra=telemetry.fields("relay", topic=name),
                )
                return False
        return True

    async def _publish_topic(self, name: str, topic: TopicDef) -> None:
        buf = self._buffer[name]
        # Up to what is known now: a topic committed to without pause (each publish a
        # round trip) would otherwise keep the relay from the other topics for good.
        target = self._known[name]
        while self.published[name] < target:
            done = self.published[name]
            while buf and buf[0][OFFSET_AT] <= done:
                buf.popleft()
            rows: list[StoredRow] = []
            if buf and buf[0][OFFSET_AT] == done + 1:
                while buf and len(rows) < _PAGE and buf[0][OFFSET_AT] == done + 1 + len(rows):
                    rows.append(buf.popleft())
            else:  # a gap (another process's rows, or the buffer overflowed): use the store
                upto = buf[0][OFFSET_AT] - 1 if buf else None
                rows = await self.store.read(name, done + 1, _PAGE, upto=upto)
            if not rows:
                return
            if self._unheard(name):  # no encoding for no one: keep the partitions' chain
                self._pass_over(name, rows)
            else:
                last = dict(self._last[name])
                await telemetry.publish(
                    self,
                    self.broker.publish,
                    name,
                    messages_for(topic, rows, last, self.max_message_bytes),
                    partial(_traces, rows),
                )
                self._last[name] = last
            self.published[name] = rows[-1][OFFSET_AT]

    def backlog(self) -> dict[str, int]:
        """Events committed (as far as this process knows) and not yet published, per topic."""
        return {n: max(0, self._known[n] - self.published.get(n, 0)) for n in self._known}

    def _unheard(self, name: str) -> bool:
        """No consumer would receive ``name``'s messages now (a ``SubscriberAware`` broker
        says so); a consumer that subscribes later catches up from the store."""
        aware = self._aware
        return aware is not None and not aware.has_subscribers(name)

    def _unheard_once(self, name: str, asked: dict[str, bool]) -> bool:
        """``_unheard(name)``, asked of the broker once per ``asked`` (one group commit's
        results, among which no one can subscribe)."""
        quiet = asked.get(name)
        if quiet is None:
            quiet = asked[name] = self._unheard(name)
        return quiet

    def _pass_over(self, name: str, rows: Sequence[StoredRow]) -> None:
        """Unheard rows: their partitions' chain moves on, nothing is encoded."""
        last = self._last[name]
        for r in rows:
            last[r[PARTITION_AT]] = r[OFFSET_AT]
        self.unheard += len(rows)

    def _caught_up(self, name: str, res: AppendResult) -> bool:
        """Nothing of ``name`` is pending or being published, and ``res`` comes right
        after what is known of it: ``res`` may be passed over here, in ``on_commit``."""
        return (
            not self._publishing
            and self.published[name] == self._known[name] == res.first_offset - 1
        )

    def _pass_over_results(self, name: str, run: Sequence[AppendResult]) -> None:
        """``_pass_over`` of consecutive results' rows (a topic of one partition: its
        chain moves to the last offset, with no look at each row); ``name`` is then known
        and published through them."""
        if self.topics[name].partitions == 1:
            self._last[name][0] = run[-1].last_offset
            self.unheard += run[-1].last_offset - run[0].first_offset + 1
        else:
            for res in run:
                self._pass_over(name, res.rows)
        self._known[name] = self.published[name] = run[-1].last_offset

    async def _persist(self) -> None:
        changed = {t: o for t, o in self.published.items() if self._persisted.get(t) != o}
        if not changed:
            return
        await self.store.relay_positions.advance(changed)  # never moves another's back
        self._persisted.update(changed)

    async def stop(self) -> None:
        """Publish what is pending (best effort), persist positions, stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.publish_pending()
        with contextlib.suppress(ReventlessError):
            await self._persist()
        if self.on_commit in self.store.commit_listeners:
            self.store.commit_listeners.remove(self.on_commit)


__all__ = ["Relay", "decode_batch", "encode_batch", "message_for", "messages_for"]
