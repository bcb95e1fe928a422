"""The EventLog: an aggregate's topic. Execute commands, append, load, read and export.

Example::

    app = rv.App(store="sqlite:///shop.db")
    customers = app.event_log(Customer)
    async with app:
        result = await customers.execute("c-1", Register(name="Ada", address="1 Main St"))
        ada = await customers.load("c-1")

Idempotency: a command sent with a ``command_id`` lands at most once. Its ``rv_commands``
row (written in the appending transaction) records where it landed, and every later
``execute``/``append`` with that id is answered from that row and the log, without
running the handler: ``duplicate=True`` with the original version, offsets and events.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from . import telemetry
from .bulk import BulkExecute, collector_paused, executed
from .bulk import ExecuteResult as ExecuteResult  # re-exported: defined beside the bulk path
from .bulk import LogOptions as LogOptions
from .codec import AGGREGATE_AT, CORRELATION_AT, MSG_ID_AT, TENANT_AT, add_tags
from .codec.codegen import fresh_state
from .decode import decode_row, opened, sealed
from .errors import (
    AggregateNotFoundError,
    CommandIdReusedError,
    ConcurrencyError,
    MetadataError,
    Rejected,
    StoreError,
)
from .ids import now_us, uuid7_str, uuid7_strs
from .scheduling import Clock, ScheduleWrite, SystemClock, schedule_writes, to_us
from .spec import Aggregate, Command, Directive, Event, Metadata
from .store.append import AppendRequest, AppendResult, CommandRecord, StoredRow
from .tags import check_tag
from .topic import Topic
from .topicdef import TopicDef, command_rows, partition_of, row_context
from .turns import Turns

A = TypeVar("A", bound=Aggregate)
_EMPTY_META = Metadata()
#: What ``load_many`` says of an aggregate with no snapshot and no events (a new one).
_NOTHING: tuple[None, list[Any]] = (None, [])
#: ``execute_many`` preloads and runs its commands this many at a time.
_MANY_WINDOW = 1000
#: An ``execute_many`` slot not filled yet (never returned: every slot gets an outcome).
_NOT_RUN: BaseException = RuntimeError("command not run")


class EventLog(Topic, BulkExecute, Generic[A]):
    """An aggregate's log: ``execute`` commands, ``load`` state, read the events.

    Built by ``App.event_log(Spec)``; usable once the App has started.
    """

    def __init__(
        self,
        spec: type[A],
        definition: TopicDef,
        *,
        options: LogOptions | None = None,
        service: str | None = None,
        clock: Clock | None = None,
        targets: Callable[[type[Aggregate] | str], str] | None = None,
    ) -> None:
        super().__init__(definition, service=service)
        self.spec = spec
        #: A new aggregate's state (``spec(id=...)``, unvalidated where that is the same).
        self._fresh = fresh_state(spec)
        self.options = options or LogOptions()
        #: The time ``rv.Schedule(after=...)`` counts from (the App's clock).
        self.clock: Clock = clock or SystemClock()
        #: The topic of a schedule's target (the App resolves its logs).
        self._targets = targets or _default_target
        self._encoders = {
            e.event_type: self.schema.encoder(e.event_type) for e in spec.event_classes
        }
        self._cache: OrderedDict[str, A] = OrderedDict()
        # Commands on one aggregate queue up in-process instead of clashing and retrying;
        # other processes are still caught by optimistic concurrency.
        self._turns = Turns()
        digest = hashlib.sha256(
            f"{spec.__module__}.{spec.__qualname__}:{spec.model_json_schema()}".encode()
        )
        self._state_fingerprint = digest.hexdigest()

    # -- loading ---------------------------------------------------------------------------

    async def _load_cached(self, aggregate_id: str, preloaded: dict[str, A] | None = None) -> A:
        agg = self._cache.get(aggregate_id)
        if agg is not None:
            self._cache.move_to_end(aggregate_id)
            return agg
        agg = preloaded.pop(aggregate_id, None) if preloaded else None
        if agg is None:
            agg = await self._load_fresh(aggregate_id)
        self._remember(agg)
        return agg

    async def _preload(self, aggregate_ids: Iterable[str]) -> dict[str, A]:
        """The states of the uncached ``aggregate_ids``, loaded together (``load_many``):
        a batch of commands on new or cold aggregates reads the store once, not once per
        command. A state that goes stale before its command runs fails that command's
        append on its version and is reloaded, as a cached one would be."""
        ids = [a for a in dict.fromkeys(aggregate_ids) if a not in self._cache]
        if not ids:
            return {}
        loaded = await self.store.load_many(self.name, ids)
        fresh = self._fresh
        return {
            a: fresh(a) if loaded[a] == _NOTHING else await self._fold(a, *loaded[a]) for a in ids
        }

    def _remember(self, agg: A) -> None:
        if self.options.cache_size <= 0:
            return
        self._cache[agg.id] = agg
        self._cache.move_to_end(agg.id)
        while len(self._cache) > self.options.cache_size:
            self._cache.popitem(last=False)

    def _remember_all(self, states: dict[str, A]) -> None:
        """``_remember`` of each state in turn (keyed by its aggregate id), the cache cut
        down to its size once at the end: it holds what it would after each one."""
        size, cache = self.options.cache_size, self._cache
        if size <= 0:
            return
        move = cache.move_to_end
        for aggregate_id, agg in states.items():
            cache[aggregate_id] = agg
            move(aggregate_id)
        while len(cache) > size:
            cache.popitem(last=False)

    async def _load_fresh(self, aggregate_id: str) -> A:
        snap, rows = await self.store.load(self.name, aggregate_id)
        return await self._fold(aggregate_id, snap, rows)

    async def _fold(
        self, aggregate_id: str, snap: tuple[int, str, str] | None, rows: list[StoredRow]
    ) -> A:
        """The aggregate's state from its snapshot and the rows after it (``store.load``)."""
        state = None if snap is None or snap[1] != self._state_fingerprint else snap[2]
        if state is not None and self.schema.personal:  # sealed with the aggregate's key
            state = await self.store.keyring.open_sealed(state)
        if state is not None:
            agg = self.spec.model_validate_json(state)
        else:
            if snap is not None:  # stale or forgotten snapshot: fold from the start
                rows = await self.store.read_stream(self.name, aggregate_id, 0)
            agg = self._fresh(aggregate_id)
        schema = self.schema
        for r in await opened(self.store, schema, rows):
            agg.apply(decode_row(schema, r))
        return agg

    @property
    def snapshots(self) -> bool:
        """Whether this log stores snapshots (``snapshot_every``): not when its events hold
        personal data of subjects other than the aggregate itself, whose state a
        snapshot would keep past their forgetting (the aggregate's own is sealed)."""
        return self.options.snapshot_every > 0 and self._snapshots_allowed

    @property
    def _snapshots_allowed(self) -> bool:
        return all(subject_at == AGGREGATE_AT for _, subject_at in self.schema.personal)

    async def take_snapshot(self, aggregate_id: str) -> int:
        """Store a snapshot of the aggregate's current state now, whatever
        ``snapshot_every`` says; returns the version it holds (0: no events, nothing
        stored). A log that takes no snapshots (``snapshots`` is False: personal data of
        other subjects) raises ``StoreError``.

        Example::

            await customers.take_snapshot("c-1")  # loads of c-1 start from here
        """
        if not self._snapshots_allowed:
            raise StoreError(
                f"{self.name!r} takes no snapshots: its events hold personal data of "
                "other subjects than the aggregate"
            )
        agg = await self._load_fresh(aggregate_id)
        if agg.version:
            await self._save_snapshot(agg)
        return agg.version

    def _snapshot_due(self, before: int, after: int) -> bool:
        """The snapshot policy: going from version ``before`` to ``after`` crosses a
        multiple of ``snapshot_every`` (on a log that takes snapshots)."""
        every = self.options.snapshot_every
        return bool(every) and after // every > before // every and self.snapshots

    async def _snapshot_after_append(self, aggregate_id: str, before: int, after: int) -> None:
        """``append``'s share of the snapshot policy: when the append crossed a multiple of
        ``snapshot_every``, fold the aggregate (from its last snapshot) and store one."""
        if self._snapshot_due(before, after):
            agg = self._cache.get(aggregate_id)
            if agg is None or agg.version != after:
                agg = await self._load_fresh(aggregate_id)
            if agg.version == after:  # else another writer moved on: its turn to snapshot
                await self._save_snapshot(agg)

    async def _snapshot_of(self, agg: A, events: Sequence[Event]) -> tuple[A, tuple[int, str, str]]:
        """A copy of ``agg`` with ``events`` applied, and its snapshot ``(version,
        fingerprint, state)`` for the append to store (a snapshot is due: ``_snapshot_due``)."""
        after = agg.model_copy(deep=True)
        for e in events:
            after.apply(e)
        state = after.model_dump_json()
        if self.schema.personal:
            state = await self.store.keyring.seal_text(after.id, state)
        return after, (after.version, self._state_fingerprint, state)

    async def _save_snapshot(self, agg: A) -> None:
        state = agg.model_dump_json()
        if self.schema.personal:
            state = await self.store.keyring.seal_text(agg.id, state)
        await self.store.save_snapshot(
            self.name, agg.id, agg.version, self._state_fingerprint, state
        )

    async def load(self, aggregate_id: str) -> A:
        """The aggregate's current state (version 0 if it has no events)."""
        agg = await self._load_fresh(aggregate_id)
        return agg

    async def get(self, aggregate_id: str) -> A:
        """Like ``load`` but raises ``AggregateNotFoundError`` when there are no events."""
        agg = await self.load(aggregate_id)
        if agg.version == 0:
            raise AggregateNotFoundError(self.name, aggregate_id)
        return agg

    # -- writing ---------------------------------------------------------------------------

    def _rows(
        self,
        aggregate_id: str,
        version: int,
        events: Sequence[Event],
        meta: Metadata,
        tenant: str | None,
        command_id: str | None,
    ) -> list[tuple[Any, ...]]:
        """One command's rows (the bulk paths build many commands' with ``command_rows``
        and one context)."""
        partition = partition_of(aggregate_id, self.definition.partitions)
        return command_rows(
            now_us(),
            iter(uuid7_strs(len(events))),
            row_context(meta, self.service, tenant, command_id=command_id),
            ((aggregate_id, version, partition, events),),
            self._encoders,
        )

    def _check_events(self, events: Sequence[Event]) -> None:
        """``StoreError`` for an event that is not of this log's aggregate."""
        allowed = self.spec.event_classes
        for e in events:
            if type(e) not in allowed:
                raise StoreError(f"{type(e).__name__} is not an event of {self.spec.__name__}")

    async def append(
        self,
        aggregate_id: str,
        events: Sequence[Event],
        *,
        expected_version: int,
        meta: Metadata | None = None,
        command_id: str | None = None,
        tags: Iterable[str] = (),
    ) -> AppendResult:
        """Append ``events`` after ``expected_version`` in one transaction.

        Raises ``ConcurrencyError`` (nothing lands) if another writer got there first.
        With a ``command_id`` that landed before, nothing is appended and the result is
        the original one (``duplicate=True``, its offsets and stored rows), whatever the
        ``expected_version``; ``CommandIdReusedError`` if it landed on another aggregate.
        ``tags`` adds tags to every event's own (a log whose events declare ``Tag`` fields).
        """
        meta = meta or _EMPTY_META
        tenant = self.check_tenant(meta.tenant)
        self._check_events(events)
        if command_id is not None:
            landed = await self._landed(aggregate_id, command_id)
            if landed is not None:
                return await self._appended(landed)
        rows = self._rows(aggregate_id, expected_version, events, meta, tenant, command_id)
        if tags:
            rows = self._tagged(rows, tags)
        if self.schema.personal:
            rows = await sealed(self.store, self.schema, rows)
        try:
            with telemetry.appending(self.name, len(rows), self.store.dialect):
                res = await self.store.append(
                    AppendRequest(self.name, rows, aggregate_id, expected_version, command_id)
                )
        except ConcurrencyError:
            self._cache.pop(aggregate_id, None)
            landed = await self._landed(aggregate_id, command_id)
            if landed is None:
                raise
            return await self._appended(landed)
        if res.duplicate:  # a racing writer recorded the id first
            self._cache.pop(aggregate_id, None)
            return await self._appended(await self._must_have_landed(aggregate_id, command_id))
        self._cache.pop(aggregate_id, None)  # its cached state is behind these events
        await self._snapshot_after_append(
            aggregate_id, expected_version, expected_version + len(events)
        )
        return res

    def _schedules(
        self,
        directives: Sequence[Directive],
        rows: Sequence[tuple[Any, ...]],
        meta: Metadata,
        tenant: str | None,
        command_id: str | None,
    ) -> list[ScheduleWrite]:
        """What a decision's directives store with its events (``rows``): the fired
        commands carry the events' correlation id, the last event as their cause, and
        the user and tenant; a schedule without an id gets one from that event."""
        if not directives:
            return []
        # rows lack _offset: the META indexes are one less
        cause = rows[-1][MSG_ID_AT - 1] if rows else command_id
        seed = cause or uuid7_str()
        return schedule_writes(
            directives,
            now_us=to_us(self.clock.now()),
            topic_of=self._targets,
            default_id=lambda i: command_id_for(self.name, seed, "schedule", str(i)),
            meta=Metadata.trusted(
                rows[0][CORRELATION_AT - 1] if rows else meta.correlation_id or command_id,
                cause,
                meta.user,
                None,
                None,
                rows[0][TENANT_AT - 1] if rows else tenant,
            ),
            trace=telemetry.traceparent(),
        )

    def _tagged(self, rows: list[tuple[Any, ...]], tags: Iterable[str]) -> list[tuple[Any, ...]]:
        """``rows`` with ``tags`` added to each row's own (its ``_tags``, the last value)."""
        if isinstance(tags, str):
            raise MetadataError("tags= takes a list of tags, not a str")
        extra = [check_tag(t) for t in tags]
        if self.schema.tags_at is None:
            raise StoreError(f"{self.name!r} has no tags: declare a field with rv.Tag")
        return [(*r[:-1], add_tags(r[-1], extra)) for r in rows]

    # -- idempotency -----------------------------------------------------------------------

    async def _landed(self, aggregate_id: str, command_id: str | None) -> CommandRecord | None:
        """The record of ``command_id`` if it landed (on this aggregate: else an error)."""
        if command_id is None:
            return None
        rec = await self.store.find_command(command_id)
        if rec is None:
            return None
        if rec.topic != self.name or rec.aggregate_id != aggregate_id:
            raise CommandIdReusedError(
                command_id, f"{rec.topic}/{rec.aggregate_id}", f"{self.name}/{aggregate_id}"
            )
        return rec

    async def _must_have_landed(self, aggregate_id: str, command_id: str | None) -> CommandRecord:
        rec = await self._landed(aggregate_id, command_id)
        if rec is None:  # the store said duplicate, so the record is committed
            raise StoreError(f"command id {command_id!r} was reported landed but has no record")
        return rec

    async def _landed_rows(self, rec: CommandRecord) -> list[Any]:
        if rec.first_offset is None or rec.last_offset is None:
            return []
        n = rec.last_offset - rec.first_offset + 1
        if n <= 0:
            return []
        return await self.store.read(self.name, rec.first_offset, n, upto=rec.last_offset)

    async def _appended(self, rec: CommandRecord) -> AppendResult:
        """An append's original outcome, rebuilt from its record."""
        rows = await self._landed_rows(rec)
        if rec.first_offset is None or rec.last_offset is None:
            return AppendResult(self.name, 0, -1, rows, duplicate=True)
        return AppendResult(self.name, rec.first_offset, rec.last_offset, rows, duplicate=True)

    async def _executed(self, aggregate_id: str, rec: CommandRecord) -> ExecuteResult:
        """A command's original outcome, rebuilt from its record and the log."""
        if rec.first_offset is None or rec.last_offset is None or rec.version is None:
            # recorded by an older store: only "it landed" is known
            agg = await self._load_cached(aggregate_id)
            return ExecuteResult(aggregate_id, agg.version, (), 0, -1, duplicate=True)
        schema = self.schema
        rows = await opened(self.store, schema, await self._landed_rows(rec))
        events = tuple(decode_row(schema, r) for r in rows)
        return ExecuteResult(
            aggregate_id, rec.version, events, rec.first_offset, rec.last_offset, duplicate=True
        )

    async def execute(
        self,
        aggregate_id: str,
        command: Command,
        *,
        meta: Metadata | None = None,
        command_id: str | None = None,
    ) -> ExecuteResult:
        """Load, decide, append; on a concurrency clash reload and retry (backoff + jitter).

        A handler's ``Rejected`` reaches the caller unchanged and nothing lands.

        ``command_id`` makes the command idempotent. If a command with that id landed
        before (here, in another process, or in a race with this call), the handler does
        not run and the result is the original one with ``duplicate=True``: the version
        the aggregate reached with it, its offsets and its events. An id that landed on
        another aggregate (or log) raises ``CommandIdReusedError`` and runs nothing.
        A command that was rejected or decided no events leaves no record: sending it
        again decides again. Without a ``command_id`` there is no extra query.
        """
        return await self._locked(aggregate_id, command, meta, command_id, None)

    async def _locked(
        self,
        aggregate_id: str,
        command: Command,
        meta: Metadata | None,
        command_id: str | None,
        preloaded: dict[str, A] | None,
    ) -> ExecuteResult:
        turns = self._turns
        if not turns.try_take(aggregate_id):
            await turns.wait(aggregate_id)
        try:
            with telemetry.command(self.name, type(command).__name__, aggregate_id):
                return await self._execute(aggregate_id, command, meta, command_id, preloaded)
        finally:
            turns.give(aggregate_id)

    async def _execute(
        self,
        aggregate_id: str,
        command: Command,
        meta: Metadata | None,
        command_id: str | None,
        preloaded: dict[str, A] | None = None,
    ) -> ExecuteResult:
        meta = meta or _EMPTY_META
        tenant = self.check_tenant(meta.tenant)
        opts = self.options
        personal = bool(self.schema.personal)
        if command_id is not None:
            landed = await self._landed(aggregate_id, command_id)
            if landed is not None:
                return await self._executed(aggregate_id, landed)
        cache = self._cache
        for attempt in range(opts.max_attempts):
            agg = cache.get(aggregate_id)  # (the common case, without a coroutine)
            if agg is None:
                agg = await self._load_cached(aggregate_id, preloaded)
            else:
                cache.move_to_end(aggregate_id)
            try:
                events, directives = agg.decide_all(command)
            except Rejected:
                # A twin of this command (another process) may have landed between the
                # lookup and the load: then the state refuses what the log already holds.
                landed = await self._landed(aggregate_id, command_id)
                if landed is not None:
                    return await self._executed(aggregate_id, landed)
                raise
            if not events:
                landed = await self._landed(aggregate_id, command_id)
                if landed is not None:
                    return await self._executed(aggregate_id, landed)
                if directives:  # schedules alone: their own transaction (no version check)
                    await self.store.schedules.write(
                        self._schedules(directives, [], meta, tenant, command_id)
                    )
                return ExecuteResult(aggregate_id, agg.version, (), 0, -1)
            base = agg.version
            rows = self._rows(aggregate_id, base, events, meta, tenant, command_id)
            if personal:
                rows = await sealed(self.store, self.schema, rows)
            # A snapshot due after these events is stored in their transaction.
            after: A | None = None
            snapshot: tuple[int, str, str] | None = None
            if self._snapshot_due(base, base + len(events)):
                after, snapshot = await self._snapshot_of(agg, events)
            try:
                with telemetry.appending(self.name, len(rows), self.store.dialect):
                    res = await self.store.append(
                        AppendRequest(
                            self.name,
                            rows,
                            aggregate_id,
                            base,
                            command_id,
                            schedules=self._schedules(directives, rows, meta, tenant, command_id)
                            if directives
                            else [],
                            snapshot=snapshot,
                        )
                    )
            except ConcurrencyError as clash:
                self._cache.pop(aggregate_id, None)
                # the writer that got there first may have been this very command
                landed = await self._landed(aggregate_id, command_id)
                if landed is not None:
                    return await self._executed(aggregate_id, landed)
                if attempt + 1 == opts.max_attempts:
                    raise
                telemetry.retried(self.name, attempt + 1, clash)
                delay = min(opts.backoff_max, opts.backoff_base * 2**attempt)
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                continue
            if res.duplicate:  # another process recorded the id between lookup and append
                self._cache.pop(aggregate_id, None)
                landed = await self._must_have_landed(aggregate_id, command_id)
                return await self._executed(aggregate_id, landed)
            current = self._cache.get(aggregate_id)
            cached = current is agg and agg.version == base
            if after is not None:  # the events are applied on the snapshot's copy
                agg = after
                if cached:
                    self._cache[aggregate_id] = agg
            elif cached:
                for e in events:
                    agg.apply(e)
            else:
                agg = agg.model_copy(deep=True)
                for e in events:
                    agg.apply(e)
            if not cached:
                self._cache.pop(aggregate_id, None)
            return executed(
                aggregate_id, agg.version, tuple(events), res.first_offset, res.last_offset
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def execute_many(
        self,
        commands: Iterable[tuple[str, Command] | tuple[str, Command, str | None]],
        *,
        meta: Metadata | None = None,
        concurrency: int = 256,
    ) -> list[ExecuteResult | Rejected]:
        """Execute a batch of ``(aggregate_id, command)`` or ``(aggregate_id, command,
        command_id)`` items; results in input order.

        Commands on one aggregate run in the given order. A window of up to 1,000 is
        decided in one go and appended together, one append per aggregate (``bulk.py``);
        commands that cannot go that way (a ``command_id``, schedules, a stale state) run
        one by one after it, others concurrently. A rejection is returned as a value in its slot;
        any other error is raised after the batch has settled. A ``command_id`` works as
        in ``execute``: resending a batch after a crash answers the commands that landed
        with their original outcome (``duplicate=True``) and runs only the others.
        """
        items = list(commands)
        outcomes: list[ExecuteResult | BaseException] = [_NOT_RUN] * len(items)
        for at in range(0, len(items), _MANY_WINDOW):
            window = range(at, min(len(items), at + _MANY_WINDOW))
            with collector_paused(self.options.bulk_gc_pause):  # (see there)
                preloaded = await self._preload(items[i][0] for i in window)
                # decided in one go and appended together; the rest (see bulk.py) one by one
                careful = await self._bulk(items, window, meta or _EMPTY_META, outcomes, preloaded)
            if not careful:
                continue
            todo = iter(careful)

            async def worker(todo: Iterator[int] = todo, pre: dict[str, A] = preloaded) -> None:
                # Workers take commands in input order and each takes its aggregate's lock
                # before yielding, so commands on one aggregate keep their order.
                for i in todo:
                    item = items[i]
                    command_id = item[2] if len(item) == 3 else None
                    try:
                        outcomes[i] = await self._locked(item[0], item[1], meta, command_id, pre)
                    except Exception as exc:  # Rejected is an answer, the rest raised below
                        outcomes[i] = exc

            await asyncio.gather(*(worker() for _ in range(min(concurrency, len(careful)))))
        for o in outcomes:
            if isinstance(o, BaseException) and not isinstance(o, Rejected):
                raise o
        return [o for o in outcomes if not isinstance(o, BaseException) or isinstance(o, Rejected)]

    def forget(self, aggregate_ids: Iterable[str] | None = None) -> None:
        """Drop cached aggregate states (all of them by default)."""
        if aggregate_ids is None:
            self._cache.clear()
        else:
            for a in aggregate_ids:
                self._cache.pop(a, None)


def _default_target(target: type[Aggregate] | str) -> str:
    return target if isinstance(target, str) else target.topic_name


def command_id_for(*parts: str) -> str:
    """A deterministic command id (UUIDv5) from parts, e.g. mapper name + event id."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "reventless:" + ":".join(parts)))
