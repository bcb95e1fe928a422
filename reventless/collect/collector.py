"""Running collectors: checkpoints, catch-up from the store, live delivery, dead letters.

A collector processes each topic partition strictly in offset order. Live batches come
from the broker; anything before a batch that the checkpoint has not reached (a new
collector, a restart, a lost or reordered message) is read from the store first, and
anything at or below the checkpoint is skipped, so duplicated or reordered deliveries
change nothing. Commits (and, on PostgreSQL, NOTIFYs from other processes) wake a
store poll that covers broker outages. The kinds of collectors are in ``kinds.py``.

Its partition API is public: ``acquire``/``release`` a partition (at a lease epoch, which
fences the partition's commits), ``catch_up``, ``reset_checkpoints`` (inside
``exclusive``), ``pause``/``resume``. Static and leased groups (``groups.py``),
dead-letter redrive and the Spark hand-off drive it through them. Every batch commits
through the store's one call (``CollectorStore.commit``: rows, dead letters, the lease
fence and the checkpoint in one transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from .. import telemetry
from ..broker import Broker, Message, Subscription, capabilities_of
from ..codec import OFFSET_AT, PARTITION_AT
from ..codec.ipc import decode_batch
from ..deadletter import DeadLetter, RedriveReport
from ..decode import envelopes_of, envelopes_of_arrow, opened
from ..errors import CheckpointMovedError, LeaseLostError
from ..eventlog import EventLog
from ..scheduling import ScheduleWrite
from ..spec import Aggregate, Envelope
from ..store.append import StoredRow
from ..store.collector import Apply, Failure, Fence, Progress
from ..store.port import Store
from ..store.readmodel import RowTable
from ..topicdef import TopicDef
from . import deadletter
from .batch import OFFSET, Page, after, first_offset, last_offset, of_types, rows_of, traces
from .component import Component, HandlerSpec
from .groups import LeasedGroup
from .livebatch import Run
from .options import CollectorOptions

if TYPE_CHECKING:
    from .where import TopicFilter

log = logging.getLogger("reventless.collect")

#: Events a batch gives up on: (event, error, attempts).
Failed = list[tuple[Envelope[Any], str, int]]


def failures(failed: Sequence[tuple[Envelope[Any], str, int]]) -> list[Failure]:
    """The dead letters to record for ``failed``."""
    return [
        Failure(ev.topic, ev.offset, ev.aggregate_id, ev.msg_id, ev.type, err, n)
        for ev, err, n in failed
    ]


Part = tuple[str, int]  # (topic, partition)
LogResolver = Callable[[type[Aggregate] | str], EventLog[Any]]
State = Literal["running", "paused", "resnapshot_required"]


@dataclass(slots=True)
class _Landing:
    """A catch-up page's commit in flight (``Collector.pipelined``): the checkpoint it
    moves to and the events it covers."""

    task: asyncio.Future[bool]
    checkpoint: int
    count: int = 0


class Collector:
    """A running component: a named durable subscription with a checkpoint per topic
    partition (a static or leased group shares partitions: see ``CollectorOptions``).

    ``filters`` (per topic, from the component's ``where=``) are pushed down: into the
    store reads and onto live batches before rows are built; filtered-out events still
    move the checkpoint. A partition whose checkpoint retention overtook (events after it
    were deleted unprocessed) stops in ``resnapshot_required`` instead of skipping them.
    """

    #: Whether a catch-up handles a page while the commit of the page before it is in
    #: flight (``_catch_up``): for kinds whose handling reads nothing that commit writes
    #: (side effects and mappers: a checkpoint, dead letters, schedules). A read model
    #: reads its rows in its page's transaction, so its pages commit one by one.
    pipelined = False

    def __init__(
        self,
        component: Component,
        *,
        store: Store,
        broker: Broker,
        topics: Mapping[str, TopicDef],
        dispatch: Mapping[str, Mapping[str, HandlerSpec]],
        options: CollectorOptions | None = None,
        filters: Mapping[str, TopicFilter] | None = None,
    ) -> None:
        self.component = component
        self.name = component.name
        self.store, self.broker = store, broker
        self.topics = dict(topics)
        self.dispatch = {t: dict(d) for t, d in dispatch.items()}
        self.options = opts = options or CollectorOptions()
        #: The partitions this member owns, per topic (in a leased group: right now).
        self.owned: dict[str, list[int]] = {
            n: opts.static_share(t.partitions) for n, t in self.topics.items()
        }
        #: This process's membership of a leased group (None: static).
        self.lease: LeasedGroup | None = None
        #: The lease epoch each acquired partition runs at (leased groups): it fences
        #: the partition's commits.
        self.epochs: dict[Part, int] = {}
        #: Called with (partition, epoch) when a commit found the lease taken over.
        self.on_fenced: Callable[[Part, int], None] | None = None
        if opts.group == "leased":
            self.owned = {n: [] for n in self.topics}
            self.lease = LeasedGroup(self, opts)
        #: Last processed offset per (topic, partition), as committed.
        self.checkpoints: dict[Part, int] = {}
        #: Partitions whose catch-up runs now, its pages' commits a page behind (only
        #: ``pipelined`` kinds), and per partition the commit in flight: it lands
        #: (``_land``) before the next one starts, and moves ``checkpoints`` then.
        self._overlapped: set[Part] = set()
        self._landing: dict[Part, _Landing] = {}
        self.filters = dict(filters or {})
        #: Partitions stopped because retention deleted events past their checkpoint,
        #: with the retained horizon (the last deleted offset).
        self.resnapshot_required: dict[Part, int] = {}
        self.parked: set[tuple[str, str]] = set()
        #: Topics whose pages are read as Arrow columns where the store can (their
        #: handlers take ``EventBatch``es): ``process_page`` then gets an Arrow table.
        #: (Every topic's are where that costs less than rows: ``Store.arrow_rows``.)
        self.columnar: set[str] = set()
        #: Per columnar topic, the only columns its pages are read with (batch handlers'
        #: ``columns=``, with the collector's own); absent: every column.
        self.projected: dict[str, list[str]] = {}
        self.processed = 0
        #: Per topic, the event types live delivery keeps when fewer than all (set as the
        #: collector subscribes, its handlers registered: ``wanted_types``).
        self._live_types: dict[str, frozenset[str]] = {}
        self._lock = asyncio.Lock()
        self._running = asyncio.Event()
        self._running.set()
        self._sub: Subscription | None = None
        self._poller: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Load checkpoints, subscribe, catch up from the store, start polling."""
        names = list(self.topics)
        telemetry.watch_collector(self)
        await self.store.retention.ensure_horizons()
        if self.lease is not None:  # partitions come and go with their leases
            await self.lease.start()
            self._poller = asyncio.get_running_loop().create_task(self._poll())
            return
        got, self.parked = await self.store.collectors.load(self.name)
        self.checkpoints = {(n, p): got.get((n, p), 0) for n in names for p in self.owned[n]}
        opts = self.options
        grouped = opts.members > 1
        self._sub = await self.subscribe(
            opts.static_group(self.name),
            names,
            sorted({p for ps in self.owned.values() for p in ps}) if grouped else None,
        )
        async with self._lock:
            for part in list(self.checkpoints):
                await self._catch_up(part)
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def subscribe(
        self, group: str, topics: Sequence[str], partitions: Collection[int] | None
    ) -> Subscription:
        """Subscribe ``on_messages`` to the broker as consumer ``group`` (``partitions``:
        only those topic partitions)."""
        extra: dict[str, Any] = {}
        self._live_types = self.wanted_types()
        if capabilities_of(self.broker).filters_types:
            # The broker can drop messages of no wanted event type itself (SNS filter
            # policies); what it still delivers is filtered here as always.
            extra["types"] = self._live_types
        return await self.broker.subscribe(
            group, topics, self.on_messages, partitions=partitions, **extra
        )

    def wanted_types(self) -> dict[str, frozenset[str]]:
        """Per topic, the event types this collector needs when that is fewer than all
        of the topic's types (its handlers', narrowed by its ``where=``); topics it
        needs whole (or schema topics) are left out."""
        from .where import wanted_types

        return wanted_types(self.topics, self.dispatch, self.filters)

    async def stop(self) -> None:
        """Stop delivery and polling (the checkpoint is already durable); a leased member
        gives its leases back, so others take its partitions over at once."""
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self.lease is not None:
            await self.lease.stop()
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

    # -- the partition API (groups, redrive, hand-offs) ----------------------------------

    async def acquire(self, topic: str, partition: int, epoch: int | None = None) -> int:
        """Start running ``(topic, partition)`` from its stored checkpoint (returned); in a
        leased group at lease ``epoch``, which fences its commits. Waits for work in
        flight; the caller subscribes and catches up (``catch_up``)."""
        key = (topic, partition)
        async with self._lock:  # nothing of this collector is in flight meanwhile
            # read after the claim committed: the previous owner's last commit is in it
            cp, self.parked = await self.store.collectors.load_partition(self.name, key)
            self.checkpoints[key] = cp
            if epoch is not None:
                self.epochs[key] = epoch
            self._owned_changed()
        return cp

    async def release(self, parts: Iterable[Part]) -> None:
        """Stop running ``parts`` (waiting for work in flight): their deliveries are
        dropped from now on, and nothing more of theirs commits here."""
        async with self._lock:
            for key in parts:
                self.epochs.pop(key, None)
                self.checkpoints.pop(key, None)
                self.resnapshot_required.pop(key, None)
            self._owned_changed()

    def _owned_changed(self) -> None:
        self.owned = {t: sorted(p for (n, p) in self.checkpoints if n == t) for t in self.topics}

    def reset_checkpoints(self, checkpoints: Mapping[Part, int]) -> None:
        """Adopt checkpoints another transaction committed (a Spark hand-off): for the
        partitions this member runs. Call it inside ``exclusive()``."""
        for part, offset in checkpoints.items():
            if part in self.checkpoints:
                self.checkpoints[part] = offset

    async def catch_up(self, topic: str, partition: int, *, epoch: int | None = None) -> None:
        """Process what the store holds past the partition's checkpoint (at ``epoch``
        only, if given: a partition re-acquired since is left to its new run)."""
        key = (topic, partition)
        async with self._lock:
            if epoch is None or self.epochs.get(key) == epoch:
                await self._catch_up(key)

    def unpark(self, topic: str, aggregate_id: str) -> None:
        """Let later events of an aggregate through again (its dead letters are resolved)."""
        self.parked.discard((topic, aggregate_id))

    @property
    def paused(self) -> bool:
        """True while processing is paused."""
        return not self._running.is_set()

    @property
    def state(self) -> State:
        """``resnapshot_required`` (some partition stopped), ``paused`` or ``running``."""
        if self.resnapshot_required:
            return "resnapshot_required"
        return "paused" if self.paused else "running"

    def check_resnapshot(self) -> None:
        """Raise ``ResnapshotRequiredError`` if a partition is stopped behind the horizon."""
        if not self.resnapshot_required:
            return
        from ..errors import ResnapshotRequiredError

        for (topic, partition), horizon in self.resnapshot_required.items():
            cursor = self.checkpoints[topic, partition] + 1
            raise ResnapshotRequiredError(topic, cursor, horizon, partition)

    async def accept_resnapshot(self) -> None:
        """Move the stopped partitions' checkpoints to their horizon and continue: call it
        once the component's state was rebuilt from a snapshot (or the loss is accepted)."""
        async with self._lock:
            for (topic, partition), horizon in list(self.resnapshot_required.items()):
                await self.process(topic, partition, [], horizon)
                self.checkpoints[topic, partition] = horizon
                del self.resnapshot_required[topic, partition]
                await self._catch_up((topic, partition))

    async def _behind(self, heads: Mapping[Part, int] | None = None) -> dict[Part, int]:
        """Owned partitions whose head is past the checkpoint, with that head."""
        if heads is None:
            heads = await self.store.partition_heads(list(self.topics))
        return {
            k: heads.get(k, 0)
            for k, cp in self.checkpoints.items()
            if heads.get(k, 0) > cp and k not in self.resnapshot_required
        }

    async def lag(self) -> dict[str, int]:
        """Per topic: how far (in offsets) the furthest-behind owned partition is."""
        heads = await self.store.partition_heads(list(self.topics))
        out = dict.fromkeys(self.topics, 0)
        for (t, p), cp in self.checkpoints.items():
            out[t] = max(out[t], heads.get((t, p), 0) - cp)
        return out

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Return once every owned partition's checkpoint reaches the head seen at call time
        (``ResnapshotRequiredError`` if a partition is stopped behind the retained horizon)."""
        target = await self._behind()

        async def wait() -> None:
            while any(self.checkpoints[k] < h for k, h in target.items()):
                self.check_resnapshot()
                await asyncio.sleep(0.005)
            self.check_resnapshot()

        async with asyncio.timeout(timeout):
            await wait()

    # -- delivery --------------------------------------------------------------------------

    async def on_messages(self, msgs: Sequence[Message]) -> None:
        """The broker handler: process live batches (see the module docstring)."""
        # Rows of consecutive messages of one topic partition become one batch: one
        # transaction. A message is one partition's run of offsets ``prev < o <= last``.
        pending: list[Run] = []
        for msg in msgs:
            topic = self.topics.get(msg.topic)
            if topic is None:
                continue
            data = decode_batch(msg.data)
            if not data.num_rows:
                continue
            offsets = data.column("_offset")
            first, last = int(offsets[0].as_py()), int(offsets[-1].as_py())
            partition = int(data.column("_partition")[0].as_py())
            types = self._live_types.get(msg.topic)
            if types is not None:  # events of types no handler takes never become rows
                data = of_types(data, types)
            f = self.filters.get(msg.topic)
            if f is not None:  # before rows are built: filtered-out events cost no Python
                data = f.table(data)
            prev_h = msg.headers.get("rv-prev")
            prev = int(prev_h) if prev_h and prev_h.isdigit() else None
            run = pending[-1] if pending else None
            if run and (run.topic, run.partition) == (msg.topic, partition) and prev == run.last:
                run.batches.append(data)
                run.last = last
            else:
                pending.append(Run(msg.topic, partition, [], first, last, prev, [data]))
        with telemetry.receiving(self, msgs):
            for run in pending:
                async with self._lock:
                    await self._wait_running()
                    await self._deliver_run(run)

    async def deliver(self, topic: str, rows: list[StoredRow], *, prev: int | None = None) -> None:
        """Process live rows of ``topic`` in offset order, filling gaps from the store first.

        ``prev`` is the offset of the partition's event before ``rows`` (as the relay
        sends it); without it a gap is looked for in the store."""
        by_part: dict[int, list[StoredRow]] = {}
        for r in rows:
            by_part.setdefault(r[PARTITION_AT], []).append(r)
        f = self.filters.get(topic)
        async with self._lock:
            await self._wait_running()
            for p, part in by_part.items():
                kept = part if f is None else f.rows(part)
                first, last = part[0][OFFSET_AT], part[-1][OFFSET_AT]
                await self._deliver_run(Run(topic, p, kept, first, last, prev))

    async def _deliver_run(self, run: Run) -> None:
        key = (run.topic, run.partition)
        if key not in self.checkpoints or key in self.resnapshot_required:
            return  # another member's partition, or a stopped one
        cp = self.checkpoints[key]
        if self.topics[run.topic].partitions == 1:
            gap = run.first > cp + 1  # one partition: the topic's offsets are contiguous
        else:  # without the relay's rv-prev header, look in the store
            gap = run.prev > cp if run.prev is not None else run.first > cp + 1
        if gap:
            await self._catch_up(key, upto=run.first - 1)
            if key in self.resnapshot_required:
                return
        cp = self.checkpoints[key]
        if run.last > cp:
            schema = self.topics[run.topic].schema
            pages = run.pages(schema, cp, self.options.page_size)
            await self._process_rows(key, pages, through=run.last)

    async def _catch_up(self, key: Part, upto: int | None = None) -> None:
        """Process partition ``key`` from its checkpoint to the head (or ``upto``), a page
        per transaction. While a full page is handled and committed, the next one is read
        (reader thread or connection): reading overlaps handling instead of adding to it.
        A topic of one partition read whole has gapless offsets, so the page after that
        is known too and read at the same time (two reader threads). A page read ahead is
        used only if the checkpoint ends where it starts.

        A ``pipelined`` kind, where commits overlap (``CollectorOptions.overlap_commits``,
        by default the store's), handles a page while the page before it commits (its
        checkpoint moves as that commit lands, in page order): the commit's round trip
        or fsync overlaps handling too. A commit that fails surfaces at the next one,
        after that page was handled: its events come again (at least once, as for any
        failed commit)."""
        topic = key[0]
        size = self.options.page_size
        # one partition, read whole: its offsets are gapless past the retention horizon
        contiguous = self.topics[topic].partitions == 1 and topic not in self.filters
        depth = 2 if contiguous else 1
        ahead: dict[int, asyncio.Task[tuple[Page, int]]] = {}
        overlap = self.options.overlap_commits
        if overlap is None:
            overlap = self.store.collectors.overlap_commits
        if self.pipelined and overlap:
            self._overlapped.add(key)
        try:
            while key not in self.resnapshot_required:
                if self.paused and key in self._landing:
                    await self._land(key)  # nothing in flight while the lock is let go
                await self._wait_running()
                if key not in self.checkpoints:
                    return  # a leased partition this member lost meanwhile
                cp = self._position(key)
                if upto is not None and cp >= upto:
                    return
                task = ahead.pop(cp + 1, None)
                for start in [s for s in ahead if s <= cp + 1]:
                    await _drop(ahead.pop(start))
                if task is not None:
                    rows, through = await task
                else:
                    rows, through = await self._read_page(key, cp + 1, upto)
                if len(rows) >= size and (upto is None or through < upto):
                    asked = False
                    for k in range(depth):
                        start = through + 1 + k * size
                        if start not in ahead and (upto is None or start <= upto):
                            read = self._read_page(key, start, upto)
                            ahead[start] = asyncio.ensure_future(read)
                            asked = True
                    if asked:
                        # one turn of the loop: the reads send their requests now, and the
                        # reader works while this page is handled (handlers that never
                        # wait would otherwise let the loop turn only at the commit)
                        await asyncio.sleep(0)
                # After the read: a retention that committed before it shows here too.
                # Retention deletes a prefix of offsets, so a page of a whole topic that
                # starts right after the checkpoint proves nothing after it was deleted.
                adjacent = contiguous and len(rows) and first_offset(rows) == cp + 1
                if not adjacent and await self._overtaken(key, cp):
                    return
                if through <= cp:
                    return
                await self._process_rows(key, [rows], through=through)
        finally:
            self._overlapped.discard(key)
            for task in ahead.values():
                await _drop(task)
            if key in self._landing:
                await self._land_last(key)

    async def _read_page(self, key: Part, start: int, upto: int | None) -> tuple[Page, int]:
        """A page of partition ``key`` from offset ``start`` that this collector reads (its
        ``where=`` filter evaluated by the store), and the offset the read got through."""
        topic, partition = key
        part = None if self.topics[topic].partitions == 1 else partition
        page, f = self.options.page_size, self.filters.get(topic)
        if f is None:
            if topic in self.columnar or self.store.arrow_rows:
                columns = self.projected.get(topic)
                rows = await self.store.read_columns(
                    topic, start, page, upto=upto, partition=part, columns=columns
                )
            else:
                rows = await self.store.read(topic, start, page, upto=upto, partition=part)
            return rows, (last_offset(rows) if len(rows) else start - 1)
        return await self.store.read_matching(
            topic, start, page, f.clause(self.store.dialect), upto=upto, partition=part
        )

    async def _overtaken(self, key: Part, checkpoint: int) -> bool:
        """Whether retention deleted events after ``checkpoint`` of partition ``key``; if
        so the partition stops in ``resnapshot_required`` (and it is logged)."""
        topic, partition = key
        found = await self.store.retention.horizon_past(topic, partition, checkpoint)
        if found is None:
            return False
        log.error(
            "collector %s: retention deleted topic %s partition %d up to offset %d, past its "
            "checkpoint %d: the partition is stopped (resnapshot required: rebuild the "
            "state, then accept_resnapshot())",
            self.name,
            topic,
            partition,
            found,
            checkpoint,
            extra=telemetry.fields(self.name, topic=topic, partition=partition, offset=found),
        )
        self.resnapshot_required[key] = found
        return True

    async def _poll(self) -> None:
        # Woken by commits (LISTEN/NOTIFY on PostgreSQL), else every poll_interval. Live
        # batches normally arrive through the broker first; the short grace period keeps
        # this loop from racing them.
        seen = self.store.changes
        while True:
            woken = await self.store.wait_for_change(self.options.poll_interval, seen)
            mark = self.store.changes  # commits after this are waited for next time
            await asyncio.sleep(self.options.grace)
            try:
                if woken and self._quiet():
                    seen = mark
                    continue
                behind = await self._behind()
                if behind and self._lock.locked():
                    # a delivery or catch-up runs: look again shortly (the next wait
                    # returns at once), it may not cover every row that is behind
                    seen = -1
                    await asyncio.sleep(0.05)
                    continue
                seen = mark
                if behind:
                    async with self._lock:
                        for key in behind:
                            await self._catch_up(key)
            except asyncio.CancelledError:
                raise
            except LeaseLostError as exc:  # the member stops the partition (lease.py)
                log.warning("collector %s: %s", self.name, exc, extra=telemetry.fields(self.name))
            except Exception:
                log.exception(
                    "collector %s: catch-up poll failed",
                    self.name,
                    extra=telemetry.fields(self.name),
                )

    def _quiet(self) -> bool:
        """Cheap in-memory check: nothing this collector reads moved past its checkpoints."""
        known = self.store.known_heads
        return all(
            known.get(t, 0) <= self.checkpoints.get((t, 0), 0)
            for t, topic in self.topics.items()
            if topic.partitions == 1
        ) and all(topic.partitions == 1 for topic in self.topics.values())

    async def _process_rows(
        self, key: Part, pages: Iterable[Page], *, through: int | None = None
    ) -> None:
        """Handle ``pages`` of rows (offset order) and move the checkpoint to the last of
        them, or to ``through`` when the run went further (rows the predicate filtered
        out). Each page is one transaction: tens of thousands of live envelopes at once
        cost more in cyclic GC passes (~3 us/event) than decoding them does."""
        topic, partition = key
        chunks = iter(pages)  # each at most a page: Run.pages and the store reads cut them
        chunk: Page = next(chunks, [])
        following = next(chunks, None)
        while key in self.checkpoints:  # not a leased partition lost meanwhile
            cp = self._position(key)
            if len(chunk) and first_offset(chunk) <= cp:  # a moved checkpoint covers some
                chunk = after(chunk, cp)
            end = last_offset(chunk) if len(chunk) else cp
            if following is None and through is not None:
                end = max(end, through)
            if end > cp:
                try:
                    with telemetry.batch(
                        self, topic, partition, len(chunk), end, partial(traces, chunk)
                    ):
                        await self.process_page(topic, partition, chunk, end)
                except CheckpointMovedError as moved:
                    if not self._adopt(key, moved):
                        raise
                    continue  # this page again, without what the stored checkpoint covers
                landing = self._landing.get(key)
                if landing is not None and landing.checkpoint == end:
                    landing.count = len(chunk)  # counted as it lands
                else:
                    self.checkpoints[key] = end
                    self.processed += len(chunk)
            if following is None:
                return
            chunk, following = following, next(chunks, None)

    def _position(self, key: Part) -> int:
        """The offset partition ``key`` is handled through: its checkpoint, or the one a
        commit in flight moves it to."""
        landing = self._landing.get(key)
        return self.checkpoints[key] if landing is None else landing.checkpoint

    async def _land(self, key: Part) -> None:
        """Wait for partition ``key``'s commit in flight and move its checkpoint (its
        failure is raised here). A commit refused because the stored checkpoint is
        already the one it moves to had landed before, its answer lost: it counts as
        landed, and the page handled behind it commits next instead of coming again."""
        landing = self._landing.pop(key)
        try:
            await landing.task
        except CheckpointMovedError as moved:
            if moved.stored != landing.checkpoint:
                raise
        if key in self.checkpoints:
            self.checkpoints[key] = landing.checkpoint
            self.processed += landing.count

    async def _land_last(self, key: Part) -> None:
        """``_land`` at the end of a catch-up. An earlier commit that landed although its
        answer was lost is adopted (the poll goes on from there); a failure while the
        catch-up already fails is logged, and the catch-up's own error goes on."""
        failing = sys.exc_info()[1] is not None
        try:
            await self._land(key)
        except CheckpointMovedError as moved:
            if not self._adopt(key, moved) and not failing:
                raise
        except Exception as exc:
            if not failing:
                raise
            log.warning(
                "collector %s: a commit of %s/%d failed as well: %s",
                self.name,
                *key,
                exc,
                extra=telemetry.fields(self.name, topic=key[0], partition=key[1]),
            )

    def _adopt(self, key: Part, moved: CheckpointMovedError) -> bool:
        """Go on from the stored checkpoint (True if it is past this member's): a batch's
        commit landed although its answer was lost (the connection broke at COMMIT), so
        its events are not processed twice."""
        log.warning(
            "collector %s: %s (an earlier commit landed); going on from there",
            self.name,
            moved,
            extra=telemetry.fields(self.name, topic=key[0], partition=key[1], offset=moved.stored),
        )
        if key not in self.checkpoints or moved.stored <= self.checkpoints[key]:
            return False
        self.checkpoints[key] = moved.stored
        return True

    async def process_page(self, topic: str, partition: int, page: Page, checkpoint: int) -> None:
        """Handle one page of stored rows (offset order) and durably move the partition's
        checkpoint to ``checkpoint``: decodes the rows it has handlers for, then
        ``process``."""
        handlers = self.dispatch.get(topic, {})
        schema = self.topics[topic].schema
        whole = await self.whole(topic, partition, page)
        if "*" not in handlers:  # (of an Arrow page before its rows are made)
            whole = of_types(whole, handlers.keys())
        if isinstance(whole, pa.Table) and not schema.personal:
            envs = envelopes_of_arrow(schema, topic, whole)
        else:
            rows = rows_of(whole)
            if schema.personal:
                rows = await opened(self.store, schema, rows)
            envs = envelopes_of(schema, topic, rows)
        await self.process(topic, partition, envs, checkpoint)

    async def whole(self, topic: str, partition: int, page: Page | pa.RecordBatch) -> Page:
        """``page`` with every column as stored: an Arrow page read with only the
        ``projected`` columns, or the converted columns of a batch (``EventBatch.arrow``),
        is read again as rows, at its offsets."""
        if isinstance(page, list) or (isinstance(page, pa.Table) and topic not in self.projected):
            return page
        if not len(page):
            return []
        offsets = page.column(OFFSET).to_pylist()
        part = None if self.topics[topic].partitions == 1 else partition
        want, first, last = set(offsets), offsets[0], offsets[-1]
        got = await self.store.read(topic, first, last - first + 1, upto=last, partition=part)
        return [r for r in got if r[OFFSET_AT] in want]

    def handler_for(self, ev: Envelope[Any]) -> HandlerSpec:
        """The handler registered for ``ev``'s topic and type."""
        return self.handler_of(ev.topic, ev.type)

    def handler_of(self, topic: str, event_type: str) -> HandlerSpec:
        """The handler registered for events of ``event_type`` on ``topic``."""
        handlers = self.dispatch[topic]
        spec = handlers.get(event_type) or handlers.get("*")
        assert spec is not None
        return spec

    def is_parked(self, ev: Envelope[Any]) -> bool:
        """True if ``ev``'s aggregate has an open dead letter here."""
        return ev.aggregate_id is not None and (ev.topic, ev.aggregate_id) in self.parked

    def park(self, ev: Envelope[Any]) -> None:
        """Hold back later events of ``ev``'s aggregate until redriven."""
        if ev.aggregate_id is not None:
            self.parked.add((ev.topic, ev.aggregate_id))

    def fence(self, part: Part) -> Fence | None:
        """The lease fence of ``part``'s commits (None: a static member). Raises
        ``LeaseLostError`` in a leased group that does not run ``part`` any more."""
        if self.lease is None:
            return None
        epoch = self.epochs.get(part)
        if epoch is None:
            raise LeaseLostError(
                f"collector {self.name!r} worker {self.lease.worker!r} no longer holds topic "
                f"{part[0]!r} partition {part[1]}: nothing of the batch landed"
            )
        return Fence(self.lease.worker, epoch)

    async def commit(
        self,
        topic: str,
        partition: int,
        checkpoint: int | None,
        *,
        failed: Sequence[tuple[Envelope[Any], str, int]] = (),
        rows: RowTable | None = None,
        apply: Apply | None = None,
        schedules: Sequence[ScheduleWrite] = (),
    ) -> bool:
        """Commit a batch of ``(topic, partition)`` through the store's one call: the lease
        fence, ``apply`` on ``rows``, dead letters, ``schedules`` and the checkpoint (None:
        leave it) in one transaction. False when ``apply`` left the batch (nothing
        written)."""
        part = (topic, partition)
        if part in self._landing:  # a partition's commits land in order
            await self._land(part)
        if checkpoint is not None and rows is None and part in self._overlapped:
            task = asyncio.ensure_future(
                self._commit(part, checkpoint, failed, None, None, schedules)
            )
            self._landing[part] = _Landing(task, checkpoint)
            return True
        return await self._commit(part, checkpoint, failed, rows, apply, schedules)

    async def _commit(
        self,
        part: Part,
        checkpoint: int | None,
        failed: Sequence[tuple[Envelope[Any], str, int]],
        rows: RowTable | None,
        apply: Apply | None,
        schedules: Sequence[ScheduleWrite],
    ) -> bool:
        topic, partition = part
        fence = self.fence(part)
        progress = (
            None
            if checkpoint is None
            else Progress(topic, partition, checkpoint, fence, after=self.checkpoints.get(part))
        )
        try:
            return await self.store.collectors.commit(
                self.name,
                progress,
                failed=failures(failed),
                fence=None if fence is None or progress is not None else (part, fence),
                rows=rows,
                apply=apply,
                schedules=schedules,
            )
        except LeaseLostError:
            if fence is not None and self.on_fenced is not None:
                self.on_fenced(part, fence.epoch)
            raise

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

    async def dead_letters(self) -> list[DeadLetter]:
        """This collector's open dead letters, per aggregate in offset order."""
        return await self.store.collectors.dead_letters(self.name)

    async def redrive(self, aggregate_id: str | None = None) -> RedriveReport:
        """Retry dead letters per aggregate in offset order, stopping an aggregate at its
        first failure; an aggregate with none left is un-parked."""
        async with self._lock:
            report = await deadletter.redrive(self, aggregate_id)
        telemetry.redriven(self.name, report.redriven, report.still_parked)
        return report


async def _drop(task: asyncio.Future[Any]) -> None:
    """Cancel a read made ahead that is not needed, and let it end (its error unseen)."""
    task.cancel()
    await asyncio.wait([task])  # a cancel of the caller still reaches the caller
    if not task.cancelled():
        task.exception()  # retrieved: a failed read ahead is not an unhandled error
