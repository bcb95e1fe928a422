"""Running collectors: checkpoints, catch-up from the store, live delivery, dead letters.

A collector processes each topic partition strictly in offset order. Live batches come
from the broker; anything before a batch that the checkpoint has not reached (a new
collector, a restart, a lost or reordered message) is read from the store first, and
anything at or below the checkpoint is skipped, so duplicated or reordered deliveries
change nothing. Commits (and, on PostgreSQL, NOTIFYs from other processes) wake a
store poll that covers broker outages. The kinds of collectors are in ``kinds.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection

from ..broker import Broker, Message, Subscription
from ..codec import META_NAMES
from ..decode import envelope_of
from ..errors import Rejected, SpecError
from ..eventlog import EventLog
from ..relay import decode_batch
from ..spec import Aggregate, Envelope
from ..store.append import StoredRow
from ..store.sql import SqlEventStore
from ..topic import TopicDef
from . import deadletter
from .component import (
    Component,
    HandlerSpec,
)

log = logging.getLogger("reventless.collect")

Failed = list[tuple[Envelope[Any], str, int]]
Part = tuple[str, int]  # (topic, partition)
PARTITION_AT = META_NAMES.index("_partition")
LogResolver = Callable[[type[Aggregate] | str], EventLog[Any]]


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    """``page_size``: events per catch-up transaction; ``poll_interval``: seconds between
    store polls (the safety net when the broker is down); ``grace``: how long a wake-up
    waits for live delivery before reading the store. ``members``/``member``: this
    process is member ``member`` of a group of ``members`` processes running the same
    collector; it owns the topic partitions ``p`` with ``p % members == member``, so
    each aggregate is handled by one member, in order."""

    page_size: int = 2000
    poll_interval: float = 0.5
    grace: float = 0.05
    members: int = 1
    member: int = 0


@dataclass(frozen=True, slots=True)
class RedriveReport:
    """Outcome of a redrive: dead letters resolved and aggregates still parked."""

    redriven: int
    still_parked: int


def _err(exc: BaseException) -> str:
    if isinstance(exc, Rejected):
        return f"Rejected {exc.code}: {exc.detail}"
    return f"{type(exc).__name__}: {exc}"


class Collector:
    """A running component: a named durable subscription with a checkpoint per topic
    partition (``CollectorOptions.members``/``member`` share partitions in a group)."""

    def __init__(
        self,
        component: Component,
        *,
        store: SqlEventStore,
        broker: Broker,
        topics: Mapping[str, TopicDef],
        dispatch: Mapping[str, Mapping[str, HandlerSpec]],
        options: CollectorOptions | None = None,
    ) -> None:
        self.component = component
        self.name = component.name
        self.store, self.db, self.broker = store, store.db, broker
        self.topics = dict(topics)
        self.dispatch = {t: dict(d) for t, d in dispatch.items()}
        self.options = opts = options or CollectorOptions()
        if not 0 <= opts.member < opts.members:
            raise SpecError(f"{self.name}: member must be 0..{opts.members - 1}")
        #: The partitions this member owns, per topic.
        self.owned: dict[str, list[int]] = {
            n: [p for p in range(t.partitions) if p % opts.members == opts.member]
            for n, t in self.topics.items()
        }
        #: Last processed offset per (topic, partition).
        self.checkpoints: dict[Part, int] = {}
        self.parked: set[tuple[str, str]] = set()
        self.processed = 0
        self._lock = asyncio.Lock()
        self._running = asyncio.Event()
        self._running.set()
        self._sub: Subscription | None = None
        self._poller: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load checkpoints, subscribe, catch up from the store, start polling."""
        names = list(self.topics)
        q = self.db.q

        def load(conn: Connection) -> tuple[dict[Part, int], set[tuple[str, str]]]:
            sql = (
                f"SELECT topic, {q('partition')}, {q('offset')} FROM rv_checkpoints "
                f"WHERE component = {self.db.mark}"
            )
            got = {
                (str(t), int(p)): int(o)
                for t, p, o in conn.exec_driver_sql(sql, (self.name,)).all()
            }
            return got, deadletter.parked_sync(self.db, conn, self.name)

        got, self.parked = await self.db.read(load)
        self.checkpoints = {(n, p): got.get((n, p), 0) for n in names for p in self.owned[n]}
        opts = self.options
        grouped = opts.members > 1
        self._sub = await self.broker.subscribe(
            f"{self.name}.m{opts.member}of{opts.members}" if grouped else self.name,
            names,
            self._on_messages,
            partitions=sorted({p for ps in self.owned.values() for p in ps}) if grouped else None,
        )
        async with self._lock:
            for part in list(self.checkpoints):
                await self._catch_up(part)
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def stop(self) -> None:
        """Stop delivery and polling (the checkpoint is already durable)."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._sub is not None:
            await self._sub.close()
        self._running.set()

    def pause(self) -> None:
        """Stop processing (deliveries wait: backpressure on the broker)."""
        self._running.clear()

    def resume(self) -> None:
        """Continue processing after ``pause``."""
        self._running.set()

    async def _wait_running(self) -> None:
        """Wait while paused (called holding the lock, which a paused collector lets go
        of, so ``exclusive`` can get in; checkpoints are read again afterwards)."""
        while not self._running.is_set():
            self._lock.release()
            try:
                await self._running.wait()
            finally:
                await self._lock.acquire()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold deliveries and catch-ups (they wait) while the caller changes this
        collector's table or checkpoints, e.g. a Spark rebuild swapping its table in."""
        async with self._lock:
            yield

    @property
    def paused(self) -> bool:
        """True while processing is paused."""
        return not self._running.is_set()

    async def _behind(self, heads: Mapping[Part, int] | None = None) -> dict[Part, int]:
        """Owned partitions whose head is past the checkpoint, with that head."""
        if heads is None:
            heads = await self.store.partition_heads(list(self.topics))
        return {k: heads.get(k, 0) for k, cp in self.checkpoints.items() if heads.get(k, 0) > cp}

    async def lag(self) -> dict[str, int]:
        """Per topic: how far (in offsets) the furthest-behind owned partition is."""
        heads = await self.store.partition_heads(list(self.topics))
        out = dict.fromkeys(self.topics, 0)
        for (t, p), cp in self.checkpoints.items():
            out[t] = max(out[t], heads.get((t, p), 0) - cp)
        return out

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once every owned partition's checkpoint reaches the head seen at call time."""
        target = await self._behind()

        async def wait() -> None:
            while any(self.checkpoints[k] < h for k, h in target.items()):
                await asyncio.sleep(0.005)

        await asyncio.wait_for(wait(), timeout)

    # -- delivery --------------------------------------------------------------------------

    async def _on_messages(self, msgs: Sequence[Message]) -> None:
        # Rows of consecutive messages of one topic partition become one batch: one
        # transaction.
        pending: list[tuple[str, int | None, list[StoredRow], int | None]] = []
        for msg in msgs:
            topic = self.topics.get(msg.topic)
            if topic is None:
                continue
            rows = topic.schema.from_arrow_rows(decode_batch(msg.data), with_meta=True)
            if not rows:
                continue
            prev_h = msg.headers.get("rv-prev")
            prev = int(prev_h) if prev_h and prev_h.isdigit() else None
            last = pending[-1] if pending else None
            if last and (last[0], last[1]) == (msg.topic, msg.partition) and prev == last[2][-1][0]:
                last[2].extend(rows)
            else:
                pending.append((msg.topic, msg.partition, rows, prev))
        for name, _, rows, prev in pending:
            await self.deliver(name, rows, prev=prev)

    async def deliver(self, topic: str, rows: list[StoredRow], *, prev: int | None = None) -> None:
        """Process live rows of ``topic`` in offset order, filling gaps from the store first.

        ``prev`` is the offset of the partition's event before ``rows`` (as the relay
        sends it); without it a gap is looked for in the store."""
        by_part: dict[int, list[StoredRow]] = {}
        for r in rows:
            by_part.setdefault(r[PARTITION_AT], []).append(r)
        async with self._lock:
            await self._wait_running()
            for p, part in by_part.items():
                key = (topic, p)
                if key not in self.checkpoints:
                    continue  # another member's partition
                first, cp = part[0][0], self.checkpoints[key]
                if self.topics[topic].partitions == 1:
                    gap = first > cp + 1  # one partition: the topic's offsets are contiguous
                else:  # without the relay's rv-prev header, look in the store
                    gap = prev > cp if prev is not None else first > cp + 1
                if gap:
                    await self._catch_up(key, upto=first - 1)
                cp = self.checkpoints[key]
                fresh = [r for r in part if r[0] > cp]
                if fresh:
                    await self._process_rows(key, fresh)

    async def _catch_up(self, key: Part, upto: int | None = None) -> None:
        topic, partition = key
        single = self.topics[topic].partitions == 1
        while True:
            await self._wait_running()
            cp = self.checkpoints[key]
            if upto is not None and cp >= upto:
                return
            rows = await self.store.read(
                topic,
                cp + 1,
                self.options.page_size,
                upto=upto,
                partition=None if single else partition,
            )
            if not rows:
                return
            await self._process_rows(key, rows)

    async def _poll(self) -> None:
        # Woken by commits (LISTEN/NOTIFY on PostgreSQL), else every poll_interval. Live
        # batches normally arrive through the broker first; the short grace period keeps
        # this loop from racing them.
        while True:
            woken = await self.store.wait_for_change(self.options.poll_interval)
            await asyncio.sleep(self.options.grace)
            try:
                if woken and self._quiet():
                    continue
                behind = await self._behind()
                if behind and not self._lock.locked():
                    async with self._lock:
                        for key in behind:
                            await self._catch_up(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("collector %s: catch-up poll failed", self.name)

    def _quiet(self) -> bool:
        """Cheap in-memory check: nothing this collector reads moved past its checkpoints."""
        known = self.store.known_heads
        return all(
            known.get(t, 0) <= self.checkpoints.get((t, 0), 0)
            for t, topic in self.topics.items()
            if topic.partitions == 1
        ) and all(topic.partitions == 1 for topic in self.topics.values())

    async def _process_rows(self, key: Part, rows: list[StoredRow]) -> None:
        topic, partition = key
        handlers = self.dispatch.get(topic, {})
        schema = self.topics[topic].schema
        wildcard = "*" in handlers
        envs = [envelope_of(schema, topic, r) for r in rows if wildcard or r[5] in handlers]
        await self.process(topic, partition, envs, rows[-1][0])
        self.checkpoints[key] = rows[-1][0]
        self.processed += len(rows)

    def handler_for(self, ev: Envelope[Any]) -> HandlerSpec:
        """The handler registered for ``ev``'s topic and type."""
        handlers = self.dispatch[ev.topic]
        spec = handlers.get(ev.type) or handlers.get("*")
        assert spec is not None
        return spec

    def is_parked(self, ev: Envelope[Any]) -> bool:
        """True if ``ev``'s aggregate has an open dead letter here."""
        return ev.aggregate_id is not None and (ev.topic, ev.aggregate_id) in self.parked

    def park(self, ev: Envelope[Any]) -> None:
        """Hold back later events of ``ev``'s aggregate until redriven."""
        if ev.aggregate_id is not None:
            self.parked.add((ev.topic, ev.aggregate_id))

    def checkpoint_sync(self, conn: Connection, topic: str, partition: int, offset: int) -> None:
        """Upsert this collector's checkpoint inside the caller's transaction."""
        q = self.db.q
        conn.exec_driver_sql(
            f"INSERT INTO rv_checkpoints (component, topic, {q('partition')}, {q('offset')}) "
            f"VALUES ({self.db.placeholders(4)}) "
            f"ON CONFLICT (component, topic, {q('partition')}) "
            f"DO UPDATE SET {q('offset')} = excluded.{q('offset')}",
            (self.name, topic, partition, offset),
        )

    async def _commit(self, topic: str, partition: int, offset: int, failed: Failed) -> None:
        def work(conn: Connection) -> None:
            deadletter.record_sync(self.db, conn, self.name, failed)
            self.checkpoint_sync(conn, topic, partition, offset)

        await self.db.write(work)

    # -- kind-specific ---------------------------------------------------------------------

    async def process(
        self, topic: str, partition: int, envs: list[Envelope[Any]], checkpoint: int
    ) -> None:
        """Handle a batch and durably move the partition's checkpoint to ``checkpoint``."""
        raise NotImplementedError

    async def redo(self, ev: Envelope[Any]) -> None:
        """Handle one dead-lettered event again; raise if it still fails."""
        raise NotImplementedError

    # -- dead letters ----------------------------------------------------------------------

    async def dead_letters(self) -> list[deadletter.DeadLetter]:
        """This collector's open dead letters, per aggregate in offset order."""
        return await self.db.read(lambda c: deadletter.list_sync(self.db, c, self.name))

    async def redrive(self, aggregate_id: str | None = None) -> RedriveReport:
        """Retry dead letters per aggregate in offset order, stopping an aggregate at its
        first failure; an aggregate with none left is un-parked."""
        async with self._lock:
            letters = await self.dead_letters()
            groups: dict[tuple[str, str | None], list[deadletter.DeadLetter]] = {}
            for dl in letters:
                if aggregate_id is None or dl.aggregate_id == aggregate_id:
                    groups.setdefault((dl.topic, dl.aggregate_id), []).append(dl)
            ok = 0
            stuck = 0
            for (topic, agg), items in groups.items():
                schema = self.topics[topic].schema
                for dl in items:
                    rows = await self.store.read(topic, dl.offset, 1)
                    ev = envelope_of(schema, topic, rows[0])
                    try:
                        await self.redo(ev)
                    except Exception as exc:
                        err = _err(exc)
                        await self.db.write(
                            partial(deadletter.bump_sync, self.db, letter_id=dl.id, error=err)
                        )
                        stuck += 1
                        break
                    await self.db.write(partial(deadletter.resolve_sync, self.db, letter_id=dl.id))
                    ok += 1
                else:
                    if agg is not None:
                        self.parked.discard((topic, agg))
            return RedriveReport(ok, stuck)
