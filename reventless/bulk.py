"""``execute_many``'s bulk path: decide a window of commands in one go, append together.

The careful path runs each command as ``execute`` would (its turn on the aggregate, a
decision, an append that waits for its group commit): some 30 us of Python per command.
Most of that is the per-command machinery, not the work. In bulk, a window's commands
are decided one after another on the event loop, each aggregate's state moving on in
memory from one of its commands to the next, and all their appends are queued at once
(``store.append_many``): one transaction per group limit, no task or future per command.

Guarantees are those of ``execute``: each command's append carries the version it was
decided on, so a state that went stale (another process wrote) fails its append alone.
That command and the later ones on its aggregate then run the careful way (reload,
decide again, retry). Commands the bulk path does not take (a ``command_id``, which needs
its record looked up first; tracing on, which wants a span per command; an aggregate
whose turn is held by another caller) run the careful way too, and so do the later
commands on their aggregates, so each aggregate's commands keep their order.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import telemetry
from .decode import sealed
from .errors import ConcurrencyError
from .ids import now_us, uuid7_strs
from .spec import Aggregate, Command, Event, Metadata
from .store.append import AppendRequest, AppendResult
from .topicdef import RowContext, command_rows, partition_of, row_context

if TYPE_CHECKING:
    from .codec.schema import TopicSchema
    from .store.port import Store
    from .topicdef import TopicDef
    from .turns import Turns

Item = tuple[str, Command] | tuple[str, Command, str | None]


class _CollectorPause:
    """Who holds CPython's cyclic garbage collector off (``collector_paused``): a count
    of the pauses under way, so overlapping ones (two ``execute_many`` calls on one
    loop, or on loops of two threads) turn it back on once, when the last one ends, and
    only if it was on when the first began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self._resume = False

    @contextmanager
    def __call__(self, pause: bool = True) -> Iterator[None]:
        if not pause:
            yield
            return
        with self._lock:
            if not self._held:
                self._resume = gc.isenabled()
                gc.disable()
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                if not self._held and self._resume:
                    gc.enable()


#: A window of bulk commands makes some twenty container objects per command (the
#: command's and event's models, the state, rows, the request, the result) that live
#: until the window is written and answered. With the collector on, every 700 of them
#: start a young-generation pass over objects that are all still alive, and every tenth
#: pass an older one: 14-15% of ``execute_many``'s time on new aggregates (ad hoc,
#: callbacks on ``gc``). Held off for the window, most of them are freed by reference
#: counting first and the collector never visits them. A window is bounded (1,000
#: commands, one append), so what cyclic garbage the process makes meanwhile (any task's)
#: waits at most that long.
collector_paused = _CollectorPause()
#: ``Metadata()``: what an append without ``meta`` writes.
_EMPTY_META = Metadata()


@dataclass(frozen=True, slots=True)
class LogOptions:
    """Tuning of an EventLog.

    ``snapshot_every``: store a snapshot each N events of an aggregate (0: never).
    ``max_attempts``/``backoff_*``: retries of ``execute`` on a concurrency clash
    (exponential backoff with jitter). ``cache_size``: aggregates kept in memory.
    ``bulk_gc_pause``: ``execute_many`` holds CPython's cyclic garbage collector off
    while it runs a window of its commands in bulk (``collector_paused``).
    """

    snapshot_every: int = 100
    max_attempts: int = 10
    backoff_base: float = 0.002
    backoff_max: float = 0.2
    cache_size: int = 10_000
    bulk_gc_pause: bool = True


@dataclass(frozen=True, slots=True)
class ExecuteResult:
    """What a command did: the aggregate's new version and the offsets it wrote.

    ``duplicate`` is True when the command id had landed before: nothing ran, and the
    other fields are those of the original execution (``events`` as read back from the
    log, without any that retention has removed since). For a command recorded by a
    store older than that record, the offsets are ``0, -1``, ``events`` is empty and
    ``version`` is the aggregate's current version.
    """

    aggregate_id: str
    version: int
    events: tuple[Event, ...]
    first_offset: int
    last_offset: int
    duplicate: bool = False


_new = object.__new__
_SET_RESULT = tuple(
    ExecuteResult.__dict__[f].__set__
    for f in ("aggregate_id", "version", "events", "first_offset", "last_offset", "duplicate")
)


def executed(
    aggregate_id: str, version: int, events: tuple[Event, ...], first: int, last: int
) -> ExecuteResult:
    """``ExecuteResult(aggregate_id, version, events, first, last)`` for the per-command
    hot paths: the slots set through their own descriptors, in half the time of the frozen
    dataclass's ``__init__`` (``object.__setattr__`` per field, each name looked up)."""
    out = _new(ExecuteResult)
    a, v, e, f, la, d = _SET_RESULT
    a(out, aggregate_id)
    v(out, version)
    e(out, events)
    f(out, first)
    la(out, last)
    d(out, False)
    return out


class BulkExecute:
    """EventLog's bulk path (a mixin): ``_bulk`` runs a window of ``execute_many``."""

    if TYPE_CHECKING:
        name: str
        options: LogOptions
        _turns: Turns
        _cache: OrderedDict[str, Any]
        _state_fingerprint: str
        _encoders: dict[str, Callable[[Any], tuple[Any, ...]]]
        service: str | None
        definition: TopicDef

        @property
        def store(self) -> Store: ...
        @property
        def schema(self) -> TopicSchema: ...
        def check_tenant(self, tenant: str | None) -> str | None: ...

        def _check_events(self, events: Sequence[Event]) -> None: ...
        def _snapshot_due(self, before: int, after: int) -> bool: ...
        @property
        def snapshots(self) -> bool: ...
        async def _load_fresh(self, aggregate_id: str) -> Any: ...
        async def _snapshot_after_append(
            self, aggregate_id: str, before: int, after: int
        ) -> None: ...
        def _remember(self, agg: Any) -> None: ...
        def _remember_all(self, states: dict[str, Any]) -> None: ...

    async def append_many(
        self,
        items: Iterable[tuple[str, Sequence[Event], int]],
        *,
        meta: Metadata | None = None,
    ) -> list[AppendResult | ConcurrencyError]:
        """Append events to many aggregates at once: ``(aggregate_id, events,
        expected_version)`` items, written together (one transaction up to the store's
        group limits: 2,000 items or 10,000 events). The bulk path for imports and
        migrations, where no command decides.

        Each item lands or fails on its own: a ``ConcurrencyError`` in its slot when the
        aggregate is not at ``expected_version`` (nothing of that item lands); results in
        input order. The snapshot policy holds as in ``append``.

        Example::

            got = await accounts.append_many(
                (f"acc-{i}", [Opened(owner=name)], 0) for i, name in enumerate(names)
            )
        """
        meta = meta or _EMPTY_META
        tenant = self.check_tenant(meta.tenant)
        todo = [(a, list(events), v) for a, events, v in items]
        for _, events, _ in todo:
            self._check_events(events)
        ids = iter(uuid7_strs(sum(len(events) for _, events, _ in todo)))
        produced = now_us()
        context = row_context(meta, self.service, tenant)  # the same for every item
        parts, encoders = self.definition.partitions, self._encoders
        requests = []
        for aggregate_id, events, version in todo:
            part = partition_of(aggregate_id, parts)
            rows = command_rows(
                produced, ids, context, ((aggregate_id, version, part, events),), encoders
            )
            if self.schema.personal:
                rows = await sealed(self.store, self.schema, rows)
            requests.append(AppendRequest(self.name, rows, aggregate_id, version))
        landed: list[AppendResult | Exception] = []
        if requests:
            total = sum(len(r.rows) for r in requests)
            with telemetry.appending(self.name, total, self.store.dialect):
                landed = await self.store.append_many(requests)
        out: list[AppendResult | ConcurrencyError] = []
        for (aggregate_id, events, version), res in zip(todo, landed, strict=True):
            self._cache.pop(aggregate_id, None)  # behind these events (or stale)
            if isinstance(res, ConcurrencyError):
                out.append(res)
            elif isinstance(res, Exception):
                raise res
            else:
                out.append(res)
                await self._snapshot_after_append(aggregate_id, version, version + len(events))
        return out

    async def _bulk(
        self,
        items: Sequence[Item],
        window: range,
        meta: Metadata,
        outcomes: list[Any],
        preloaded: dict[str, Any],
    ) -> list[int]:
        """Run the window's commands in bulk, their outcomes into ``outcomes``; the
        indexes left for the careful path, in input order. ``preloaded`` states are
        taken (popped) as their aggregates come up."""
        if telemetry.tracing() or self.schema.personal:
            return list(window)
        turns = self._turns
        taken: set[str] = set()
        careful: list[int] = []
        deferred: set[str] = set()  # aggregates whose later commands go the careful way
        states: dict[str, Aggregate] = {}
        # aggregate -> its commands: (index, version decided on, events)
        planned: dict[str, list[tuple[int, int, list[Event]]]] = {}
        # the commands decided here and their aggregates (two lists: no object per command)
        decided_at: list[int] = []
        decided_on: list[str] = []
        tenant = self.check_tenant(meta.tenant)
        try:
            for i in window:
                item = items[i]
                aggregate_id, command = item[0], item[1]
                agg = states.get(aggregate_id)
                if agg is None:
                    # first seen here: its turn (else the careful path waits for it)
                    if (
                        aggregate_id in deferred
                        or (len(item) == 3 and item[2] is not None)
                        or not turns.try_take(aggregate_id)
                    ):
                        deferred.add(aggregate_id)
                        careful.append(i)
                        continue
                    taken.add(aggregate_id)
                    agg = self._cache.get(aggregate_id) or preloaded.pop(aggregate_id, None)
                    if agg is None:
                        agg = await self._load_fresh(aggregate_id)
                    states[aggregate_id] = agg
                elif aggregate_id in deferred or (len(item) == 3 and item[2] is not None):
                    # a command id (its record is looked up first), or after one
                    deferred.add(aggregate_id)
                    careful.append(i)
                    continue
                try:
                    events, directives = agg.decide_all(command)
                except Exception as exc:  # Rejected is an answer, the rest raised by the caller
                    outcomes[i] = exc
                    decided_at.append(i)
                    decided_on.append(aggregate_id)
                    continue
                if directives:  # schedules (with events or alone): the careful path
                    deferred.add(aggregate_id)
                    careful.append(i)
                    continue
                decided_at.append(i)
                decided_on.append(aggregate_id)
                if not events:
                    outcomes[i] = ExecuteResult(aggregate_id, agg.version, (), 0, -1)
                    continue
                base = agg.version
                for e in events:
                    agg.apply(e)
                planned.setdefault(aggregate_id, []).append((i, base, events))
            # One request per aggregate, its commands' rows in order: the aggregate's
            # commands land together or not at all (a later one was decided on the state
            # the earlier ones left).
            requests = self._bulk_requests(planned, states, row_context(meta, self.service, tenant))
            landed: list[AppendResult | Exception] = []
            if requests:
                total = sum(len(r.rows) for r in requests)
                with telemetry.appending(self.name, total, self.store.dialect):
                    landed = await self.store.append_many(requests)
            failed: set[str] = set()
            for (aggregate_id, runs), out in zip(planned.items(), landed, strict=True):
                if not isinstance(out, AppendResult) or out.duplicate:
                    # a clash (stale state) or a store error: every command decided on the
                    # aggregate's state here runs again the careful way
                    failed.add(aggregate_id)
                    continue
                first = out.first_offset
                for i, base, events in runs:
                    last = first + len(events) - 1
                    outcomes[i] = executed(
                        aggregate_id, base + len(events), tuple(events), first, last
                    )
                    first = last + 1
            if failed:
                careful.extend(
                    i for i, a in zip(decided_at, decided_on, strict=True) if a in failed
                )
            for aggregate_id in failed:
                self._cache.pop(aggregate_id, None)  # its in-memory state ran ahead
                del states[aggregate_id]
            self._remember_all(states)
        except BaseException:
            for aggregate_id in states:
                self._cache.pop(aggregate_id, None)
            raise
        finally:
            for aggregate_id in taken:
                turns.give(aggregate_id)
        careful.sort()
        return careful

    def _bulk_requests(
        self,
        planned: dict[str, list[tuple[int, int, list[Event]]]],
        states: dict[str, Aggregate],
        context: RowContext,
    ) -> list[AppendRequest]:
        """The one append of each aggregate's bulk commands (``planned``: its commands'
        index, version decided on and events; ``states``: its state after them), with the
        snapshot they make due. Each command's rows are its own (correlated by its first
        event, ``_row_idx`` from 0), as ``execute`` would store them: the window's rows are
        built in one ``command_rows`` call and cut per aggregate."""
        parts = self.definition.partitions
        counts: list[int] = []
        commands: list[tuple[str, int, int, list[Event]]] = []
        for aggregate_id, runs in planned.items():
            partition = 0 if parts == 1 else partition_of(aggregate_id, parts)
            n = 0
            for _, version, events in runs:
                commands.append((aggregate_id, version, partition, events))
                n += len(events)
            counts.append(n)
        ids = iter(uuid7_strs(sum(counts)))
        rows = command_rows(now_us(), ids, context, commands, self._encoders)
        requests: list[AppendRequest] = []
        at = 0
        name = self.name
        every = self.options.snapshot_every if self.snapshots else 0  # (_snapshot_due)
        for (aggregate_id, runs), n in zip(planned.items(), counts, strict=True):
            base = runs[0][1]
            agg = states[aggregate_id]
            snapshot = None
            if every and agg.version // every > base // every:
                snapshot = (agg.version, self._state_fingerprint, agg.model_dump_json())
            requests.append(
                AppendRequest(name, rows[at : at + n], aggregate_id, base, None, snapshot=snapshot)
            )
            at += n
        return requests
