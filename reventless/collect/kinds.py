"""The three kinds of collectors: read models, event mappers (sagas), side effects."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import telemetry
from ..codec import AGGREGATE_AT
from ..errors import Rejected, SchemaMismatchError, SpecError, StoreError
from ..eventlog import command_id_for
from ..scheduling import Clock, ScheduleWrite, SystemClock, schedule_writes, to_us
from ..spec import Directive, Envelope, Metadata
from ..store.collector import Failure
from ..store.readmodel import ReadModelStore, RowWriter
from ..topicdef import partition_of
from .batch import (
    AGGREGATE,
    EventBatch,
    Page,
    event_batch,
    of_types,
    page_columns,
    rows_of,
)
from .collector import Collector, Failed, LogResolver, failures
from .component import (
    Delete,
    EventMapper,
    HandlerSpec,
    ReadModel,
    Send,
    SideEffectHandler,
    Upsert,
    as_ops,
    call,
    default_key,
)
from .deadletter import error_text
from .rowfold import RowFold

log = logging.getLogger("reventless.collect")

#: An envelope's aggregate id, read in C (the key of a handler that names none).
_AGGREGATE_ID = itemgetter(Envelope._fields.index("aggregate_id"))


class ReadModelCollector(Collector):
    """Keeps a ReadModel's table: rows and checkpoint commit in one transaction."""

    def __init__(self, model: ReadModel[Any], table: ReadModelStore[Any], **kw: Any) -> None:
        super().__init__(model, **kw)
        self.table = table
        for spec in [*model.handlers.values(), *model.topic_handlers.values()]:
            if spec.is_async:
                raise SpecError(f"{model.name}: read-model handlers must be plain functions")
        #: Per topic, the fold of its column upserts (topics whose handlers all are);
        #: ``folded`` counts the events applied that way.
        self.folds: dict[str, RowFold] = {}
        self.folded = 0
        for topic, handlers in self.dispatch.items():
            fold = None if "*" in handlers else RowFold.compile(model, self.topics[topic], handlers)
            if fold is not None:
                self.folds[topic] = fold
                self.columnar.add(topic)  # its catch-up pages come as Arrow where they can
                schema = self.topics[topic].schema
                if not schema.personal:
                    # ...of the columns the fold reads and the collector's own only (the
                    # handlers' path, where the fold is not exact, reads the page again)
                    self.projected[topic] = page_columns(schema, fold.columns)

    def apply_rows(
        self, rows: RowWriter, envs: list[Envelope[Any]], *, redo: bool = False
    ) -> list[Failure]:
        """Run the handlers over ``envs`` (one topic's) and write the final rows (inside
        the batch's store transaction); returns the failures to dead-letter. Each
        handler is looked up once per event type of the batch, and the keys of handlers
        keyed by aggregate are read in C."""
        table = self.table
        topic = envs[0].topic if envs else ""
        types = [ev.type for ev in envs]
        spec_of = {t: self.handler_of(topic, t) for t in set(types)}
        specs = list(map(spec_of.__getitem__, types))
        keys: list[Any]
        if len(spec_of) == 1 and (one := next(iter(spec_of.values()))).wants_current:
            by_aggregate = one.key is default_key
            keys = list(map(_AGGREGATE_ID if by_aggregate else one.key, envs))
            need = set(keys)
        else:
            pairs = zip(envs, specs, strict=True)
            keys = [s.key(ev) if s.wants_current else None for ev, s in pairs]
            need = {k for k, s in zip(keys, specs, strict=True) if s.wants_current}
        state: dict[Any, Any] = rows.fetch(list(need)) if need else {}
        changed: dict[Any, Any] = {}
        failed: list[tuple[Envelope[Any], str, int]] = []
        row_type, key_field = table.model.row, table.model.key
        check_parked = bool(self.parked) and not redo
        for ev, spec, key in zip(envs, specs, keys, strict=True):
            if check_parked and self.is_parked(ev):
                failed.append((ev, "parked behind an earlier dead letter of this aggregate", 0))
                continue
            try:
                out = spec.fn(ev, state.get(key)) if spec.wants_current else spec.fn(ev)
                if type(out) is Upsert and type(out.row) is row_type:  # the common case
                    k = getattr(out.row, key_field)
                    state[k] = changed[k] = out.row
                    continue
                staged: list[tuple[Any, Any]] = []
                for op in as_ops(out):
                    if isinstance(op, Upsert):
                        staged.append((table.key_of(op.row), op.row))
                    elif isinstance(op, Delete):
                        staged.append((op.key, None))
                    else:
                        raise SpecError(f"{self.name}: handlers return Upsert/Delete, got {op!r}")
            except Exception as exc:
                if redo:
                    raise
                failed.append((ev, error_text(exc), 1))
                self.park(ev)
                continue
            for k, row in staged:
                state[k] = row
                changed[k] = row
        rows.write(changed)
        if failed:
            telemetry.dead_lettered(self.name, failed[0][0].topic, len(failed), failed[0][1])
        return failures(failed)

    async def process_page(self, topic: str, partition: int, page: Page, checkpoint: int) -> None:
        """Column upserts fold the page without decoding it (``rowfold``; of an Arrow page
        only the columns the fold reads become Python values) where that is exact;
        otherwise the handlers run."""
        fold = self.folds.get(topic)
        if fold is None or self.parked:
            await super().process_page(topic, partition, page, checkpoint)
            return
        rows = page if isinstance(page, list) else fold.narrow(page)

        def fold_rows(table: RowWriter) -> list[Failure] | None:
            keys = fold.keys(rows)
            current = table.fetch(keys) if keys else {}
            final = fold.fold(rows, current) if keys is not None else None
            if final is None:
                return None  # the handlers run instead
            table.write(final)
            return []

        if await self.commit(topic, partition, checkpoint, rows=self.table, apply=fold_rows):
            self.folded += len(rows)
        else:  # the handlers, on every column of the page
            await super().process_page(topic, partition, page, checkpoint)

    async def process(
        self, topic: str, partition: int, envs: list[Envelope[Any]], checkpoint: int
    ) -> None:
        """Rows, dead letters and checkpoint in one transaction."""

        def apply(rows: RowWriter) -> list[Failure]:
            return self.apply_rows(rows, envs) if envs else []

        await self.commit(topic, partition, checkpoint, rows=self.table, apply=apply)

    async def redo(self, ev: Envelope[Any]) -> None:
        """Apply one event again (no checkpoint change); raise on failure. In a leased
        group only while this member holds the event's partition (else
        ``LeaseLostError``, nothing lands)."""

        def apply(rows: RowWriter) -> list[Failure]:
            return self.apply_rows(rows, [ev], redo=True)  # raises on failure

        part = partition_of(ev.aggregate_id, self.topics[ev.topic].partitions)
        await self.commit(ev.topic, part, None, rows=self.table, apply=apply)


class _RetryingCollector(Collector):
    max_attempts = 3
    backoff = 0.05
    concurrency = 256
    #: The time ``rv.Schedule(after=...)`` counts from (the App's clock).
    clock: Clock = SystemClock()
    resolve: LogResolver | None = None

    async def handle(self, ev: Envelope[Any], spec: HandlerSpec) -> list[ScheduleWrite]:
        """Handle ``ev``; returns the schedules to store with the batch."""
        raise NotImplementedError

    def scheduled(self, ev: Envelope[Any], ops: list[Any]) -> list[ScheduleWrite]:
        """The schedules among a handler's ``ops``: an id left out is derived from the
        event and the position (a redelivery writes the same schedule again), and the
        fired commands inherit the event's correlation id with the event as cause."""
        directives = [op for op in ops if isinstance(op, Directive)]
        if not directives:
            return []
        resolve = self.resolve
        return schedule_writes(
            directives,
            now_us=to_us(self.clock.now()),
            topic_of=lambda t: resolve(t).name if resolve is not None else str(t),
            default_id=lambda i: command_id_for(self.name, ev.msg_id, "schedule", str(i)),
            meta=Metadata.trusted(
                ev.meta.correlation_id or ev.msg_id,
                ev.msg_id,
                ev.meta.user,
                None,
                None,
                ev.meta.tenant,
            ),
            trace=telemetry.traceparent() or ev.trace,
        )

    #: Whether ``handle`` is just the handler's call and its schedules (side effects): the
    #: first attempt then calls the handler directly (in ``process``).
    direct = False
    pipelined = True

    async def process(
        self, topic: str, partition: int, envs: list[Envelope[Any]], checkpoint: int
    ) -> None:
        """Handle a page's events and commit them with the checkpoint; each aggregate's
        events in their order. The events are handled on this task, in page order, for as
        long as no handler waits: a handler that returns without waiting needs no task or
        coroutine of ours (a task per aggregate cost more than a counting handler, and a
        log of many independent commands has a new aggregate at almost every event). At
        the first turn of the event loop, which only a handler that waits lets come (I/O,
        a retry's back-off, a command's group commit), the events after the waiting one
        go to tasks, one per aggregate, and run concurrently: handlers that wait overlap,
        and the commands they send share group commits. The waiting event's aggregate
        goes on here once it is done."""
        failed: Failed = []
        scheduled: list[tuple[int, list[ScheduleWrite]]] = []
        gate = asyncio.Semaphore(self.concurrency)
        # Untraced side effects take the direct lane: the first call goes straight to the
        # handler, inline here (no span, no retry frame, no coroutine of ours per event); a
        # failure goes on to ``_attempt``'s retries as its first attempt.
        direct = self.direct and not telemetry.tracing()
        types = {ev.type for ev in envs} if direct else set()
        spec_of = {t: self.handler_of(topic, t) for t in types}  # once per type and page
        attempt, scheduled_of = self._attempt, self.scheduled
        started = 0  # the events the page order below has started
        spread = False  # the rest of the page went to tasks
        tail: list[Envelope[Any]] = []  # then: the rest of the waiting event's aggregate
        runs: list[asyncio.Future[None]] = []

        async def run(part: list[Envelope[Any]], in_page_order: bool = False) -> None:
            nonlocal started
            for ev in part:
                if in_page_order:
                    if spread:
                        return
                    started += 1
                if self.parked and self.is_parked(ev):
                    failed.append((ev, "parked behind an earlier dead letter of this aggregate", 0))
                    continue
                if not direct:
                    await attempt(ev, failed, scheduled)
                    continue
                spec = spec_of[ev.type]
                try:
                    out = spec.fn(ev)
                    if spec.is_async or isinstance(out, Awaitable):
                        out = await out
                    writes = None if out is None else scheduled_of(ev, as_ops(out))
                except Exception as exc:
                    await attempt(ev, failed, scheduled, first=exc)
                    continue
                if writes:
                    scheduled.append((ev.offset, writes))

        async def gated(part: list[Envelope[Any]]) -> None:
            async with gate:
                await run(part)

        def to_tasks() -> None:
            """While the event started last waits: the events after it, a task per
            aggregate; its own aggregate's go on here once it is done."""
            nonlocal spread, tail
            spread = True
            parts: dict[str | None, list[Envelope[Any]]] = {}
            for ev in envs[started:]:  # (not setdefault: no empty list made per event)
                part = parts.get(ev.aggregate_id)
                if part is None:
                    parts[ev.aggregate_id] = [ev]
                else:
                    part.append(ev)
            tail = parts.pop(envs[started - 1].aggregate_id, [])
            runs.extend(asyncio.ensure_future(gated(p)) for p in parts.values())

        # Runs at the loop's next turn: only if a handler waits (the loop turns while it
        # does). Until then the page is handled here, in page order.
        turned = asyncio.get_running_loop().call_soon(to_tasks) if len(envs) > 1 else None
        try:
            await run(envs, in_page_order=True)
            if turned is not None:
                turned.cancel()
            if tail:
                await run(tail)
            await asyncio.gather(*runs)
        except BaseException:  # a store error: no aggregate goes on with a failed batch
            if turned is not None:
                turned.cancel()
            for r in runs:
                r.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            raise
        failed.sort(key=lambda f: f[0].offset)
        scheduled.sort(key=lambda s: s[0])  # the last write of a schedule id wins: log order
        writes = [w for _, ws in scheduled for w in ws]
        await self.commit(topic, partition, checkpoint, failed=failed, schedules=writes)
        if failed:
            telemetry.dead_lettered(self.name, topic, len(failed), failed[0][1])

    async def _attempt(
        self,
        ev: Envelope[Any],
        failed: Failed,
        scheduled: list[tuple[int, list[ScheduleWrite]]],
        first: Exception | None = None,
    ) -> None:
        """Handle ``ev`` with retries and backoff; a business refusal (``Rejected``) or the
        last failure dead-letters it and parks its aggregate. ``first``: the first
        attempt's failure, when the caller made that attempt."""
        spec = self.handler_for(ev)
        for attempt in range(1, self.max_attempts + 1):
            try:
                if first is not None:
                    exc, first = first, None
                    raise exc
                with telemetry.handling(self.name, ev.topic, ev.offset, ev.trace):
                    writes = await self.handle(ev, spec)
                if writes:
                    scheduled.append((ev.offset, writes))
                return
            except Rejected as exc:  # a business refusal will not change on retry
                failed.append((ev, error_text(exc), attempt))
                self.park(ev)
                return
            except Exception as exc:
                if attempt == self.max_attempts:
                    if isinstance(exc, StoreError):
                        # The store failed, not the handler (a mapper's command, say): the
                        # batch fails whole and is redone from the checkpoint once the
                        # store is back, instead of parking the aggregate.
                        raise
                    log.warning(
                        "%s gave up on %s@%s: %s",
                        self.name,
                        ev.topic,
                        ev.offset,
                        exc,
                        extra=telemetry.fields(self.name, topic=ev.topic, offset=ev.offset),
                    )
                    failed.append((ev, error_text(exc), attempt))
                    self.park(ev)
                else:
                    delay = self.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                    await asyncio.sleep(delay)

    async def redo(self, ev: Envelope[Any]) -> None:
        writes = await self.handle(ev, self.handler_for(ev))
        if writes:  # stored with no checkpoint move (fenced in a leased group)
            part = partition_of(ev.aggregate_id, self.topics[ev.topic].partitions)
            await self.commit(ev.topic, part, None, schedules=writes)


class MapperCollector(_RetryingCollector):
    """Turns events into commands; deterministic command ids make redelivery harmless.
    Schedules it returns are stored with the batch's checkpoint."""

    def __init__(
        self, mapper: EventMapper, resolve: LogResolver, *, clock: Clock | None = None, **kw: Any
    ) -> None:
        super().__init__(mapper, **kw)
        self.resolve = resolve
        self.clock = clock or SystemClock()

    async def handle(self, ev: Envelope[Any], spec: HandlerSpec) -> list[ScheduleWrite]:
        """Execute the commands the mapper returns for ``ev``; return its schedules."""
        ops = as_ops(await call(spec, ev))
        sends = [op for op in ops if not isinstance(op, Directive)]
        resolve = self.resolve
        assert resolve is not None  # a mapper is always built with its resolver
        for i, send in enumerate(sends):
            if not isinstance(send, Send):
                raise SpecError(
                    f"{self.name}: mappers return rv.Send(...) or rv.Schedule(...), got {send!r}"
                )
            target = resolve(send.target)
            meta = Metadata(
                correlation_id=ev.meta.correlation_id or ev.msg_id,
                causation_id=ev.msg_id,
                user=ev.meta.user,
                service=ev.meta.service,
                ip=ev.meta.ip,
                tenant=ev.meta.tenant,
            )
            with telemetry.sending(self.name, type(send.command).__name__, target.name):
                await target.execute(
                    send.aggregate_id,
                    send.command,
                    meta=meta,
                    command_id=command_id_for(self.name, ev.msg_id, str(i)),
                )
        return self.scheduled(ev, ops)


class SideEffectCollector(_RetryingCollector):
    """Runs side effects at least once; failures retry with backoff, then dead-letter.
    A topic with a batch handler (``on_batch``) gets one call per page (``EventBatch``)."""

    direct = True

    def __init__(
        self,
        handler: SideEffectHandler,
        *,
        resolve: LogResolver | None = None,
        clock: Clock | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(handler, **kw)
        self.max_attempts = handler.max_attempts
        self.backoff = handler.backoff
        self.resolve = resolve
        self.clock = clock or SystemClock()
        #: Per topic, its batch handler (the topic's only handler here).
        self.batched: dict[str, HandlerSpec] = {}
        #: Per topic whose batch handler declared ``columns``: its batches' columns.
        self.batch_columns: dict[str, list[str]] = {}
        for topic, handlers in self.dispatch.items():
            specs = {id(s): s for s in handlers.values()}
            batch = [s for s in specs.values() if s.batch]
            if batch and len(specs) > 1:
                raise SpecError(
                    f"{self.name}: a batch handler is the only handler of its log "
                    f"({topic!r} has {len(specs)})"
                )
            if batch:
                self.batched[topic] = batch[0]
                self.columnar.add(topic)
                declared = batch[0].columns
                if declared is not None:
                    schema = self.topics[topic].schema
                    try:
                        columns = page_columns(schema, declared)
                    except SchemaMismatchError as exc:
                        raise SpecError(f"{self.name}: on_batch columns: {exc}") from None
                    self.batch_columns[topic] = columns
                    if not schema.personal:  # (else read whole, opened, then selected)
                        self.projected[topic] = columns

    async def process_page(self, topic: str, partition: int, page: Page, checkpoint: int) -> None:
        """A batch topic's page: its handler's types, minus parked aggregates' events
        (dead-lettered behind their earlier letter), as one ``EventBatch``."""
        spec = self.batched.get(topic)
        if spec is None:
            await super().process_page(topic, partition, page, checkpoint)
            return
        schema = self.topics[topic].schema
        columns = self.batch_columns.get(topic)
        page = of_types(page, self.dispatch[topic].keys())
        failed: Failed = []
        parked = {a for t, a in self.parked if t == topic} if self.parked and len(page) else None
        if parked:
            if isinstance(page, list):
                held = [r for r in page if r[AGGREGATE_AT] in parked]
                page = [r for r in page if r[AGGREGATE_AT] not in parked]
            else:
                ids = pa.array(list(parked), pa.string())
                mask = pc.fill_null(pc.is_in(page.column(AGGREGATE), value_set=ids), False)
                held = page.filter(mask)
                page = page.filter(pc.invert(mask))
            if len(held):
                behind = await self._envelopes(topic, partition, held)
                reason = "parked behind an earlier dead letter of this aggregate"
                failed += [(ev, reason, 0) for ev in behind]
        if len(page):
            batch = await event_batch(self.store, schema, topic, partition, page, columns)
            await self._attempt_batch(batch, spec, failed)
        failed.sort(key=lambda f: f[0].offset)
        await self.commit(topic, partition, checkpoint, failed=failed)
        if failed:
            telemetry.dead_lettered(self.name, topic, len(failed), failed[0][1])

    async def _attempt_batch(
        self, batch: EventBatch[Any], spec: HandlerSpec, failed: Failed
    ) -> None:
        """Call a batch handler, retrying the whole batch with backoff; when it gives up,
        every event of the batch is dead-lettered (and its aggregate parked)."""
        for attempt in range(1, self.max_attempts + 1):
            try:
                with telemetry.handling(self.name, batch.topic, batch.first_offset, None):
                    await call(spec, batch)
                return
            except Exception as exc:
                last = attempt == self.max_attempts or isinstance(exc, Rejected)
                if not last:
                    delay = self.backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                    await asyncio.sleep(delay)
                    continue
                if isinstance(exc, StoreError):
                    raise  # the store failed, not the handler: the page is redone
                log.warning(
                    "%s gave up on a batch of %s events of %s from %s: %s",
                    self.name,
                    len(batch),
                    batch.topic,
                    batch.first_offset,
                    exc,
                    extra=telemetry.fields(self.name, topic=batch.topic),
                )
                if batch.columns is None:
                    events = batch.envelopes()
                else:  # read with the handler's columns only: its events again, whole
                    events = await self._envelopes(batch.topic, batch.partition, batch.arrow)
                for ev in events:
                    failed.append((ev, error_text(exc), attempt))
                    self.park(ev)
                return

    async def _envelopes(
        self, topic: str, partition: int, page: Page | pa.RecordBatch
    ) -> list[Envelope[Any]]:
        """The envelopes of ``page``'s events (to dead-letter them), read again whole if
        the page was read with the handler's columns only (``whole``)."""
        rows = rows_of(await self.whole(topic, partition, page))
        schema = self.topics[topic].schema
        return (await event_batch(self.store, schema, topic, partition, rows)).envelopes()

    async def redo(self, ev: Envelope[Any]) -> None:
        """Handle one dead-lettered event again (a batch handler: a batch of one)."""
        spec = self.batched.get(ev.topic)
        if spec is None:
            await super().redo(ev)
            return
        part = partition_of(ev.aggregate_id, self.topics[ev.topic].partitions)
        rows = await self.store.read(ev.topic, ev.offset, 1)
        schema = self.topics[ev.topic].schema
        columns = self.batch_columns.get(ev.topic)
        await call(spec, await event_batch(self.store, schema, ev.topic, part, rows, columns))

    async def handle(self, ev: Envelope[Any], spec: HandlerSpec) -> list[ScheduleWrite]:
        """Run the side effect for ``ev``; the schedules it returned are stored with the
        batch (anything else it returns is ignored)."""
        return self.scheduled(ev, as_ops(await call(spec, ev)))
