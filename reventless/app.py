"""``App``: builds logs, topics and collectors on a store URL and a broker URL, and runs them.

Example::

    app = rv.App(store="sqlite:///shop.db", broker="memory://")
    customers = app.event_log(Customer)
    directory_view = app.collect(directory)
    async with app:
        await customers.execute("c-1", Register(name="Ada", address="1 Main St"))
        await app.settle()
        print(await directory_view.get("c-1"))
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pyarrow as pa
from pydantic import BaseModel

from . import telemetry
from .broker import Broker, DeadLetterQueues, OrderAware, Undeclaring, open_broker
from .codec import TopicSchema
from .codec.ipc import Compression, decode_batch, encode_batch
from .codec.pandasprobe import probe_without_pandas
from .collect.collector import Collector
from .collect.component import (
    Component,
    Delete,
    EventMapper,
    ReadModel,
    SideEffectHandler,
    Upsert,
    as_ops,
    call,
)
from .collect.kinds import MapperCollector, ReadModelCollector, SideEffectCollector
from .collect.options import CollectorOptions
from .dcb import DcbLog
from .deadletter import DeadLetter, RedriveReport
from .decode import retired_models
from .errors import MetadataError, ReventlessError, SpecError
from .eventlog import EventLog, LogOptions
from .handle import CollectorHandle, Projection
from .relay import Relay
from .scheduler import Scheduler, SchedulerOptions
from .scheduling import Clock, SystemClock
from .spec import Aggregate, Metadata, union_members
from .store import ReadModelStore, Store, StoreOptions, open_store
from .topic import Topic
from .topicdef import TopicDef, TopicKind
from .topology import Topology

if TYPE_CHECKING:
    pass

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R", bound=BaseModel)
log = logging.getLogger("reventless")


@dataclass(frozen=True, slots=True)
class AppOptions:
    """Grouped keyword options of an App (all optional)."""

    store: StoreOptions = field(default_factory=StoreOptions)
    log: LogOptions = field(default_factory=LogOptions)
    collector: CollectorOptions = field(default_factory=CollectorOptions)
    relay_retry_interval: float = 0.5
    #: Seconds rows committed by another process may stay unpublished before this
    #: process's relay publishes them (their writer died before its relay did).
    relay_orphan_after: float = 3.0
    #: Publish this process's commits to the broker (the relay). ``False`` for pure batch
    #: loads: nothing is encoded or published here; collectors still catch up from the
    #: store, and another process's relay publishes the rows after ``relay_orphan_after``.
    publish: bool = True
    #: Default partition count of new topics (fixed per topic once created).
    partitions: int = 1
    #: At the first App start in a process, before its collectors catch up:
    #: ``gc.collect()`` then ``gc.freeze()``, so the objects that exist by then
    #: (modules, classes, the spec) leave the cyclic collector's scans. Its full passes
    #: then cost milliseconds instead of ~80 ms each, which was 1-3 us per event on the
    #: hot paths. Only reference cycles among those frozen objects that later become
    #: garbage are never collected.
    gc_freeze: bool = True
    #: The time of scheduled commands: when ``after=`` counts from and when they are due
    #: (``rv.ManualClock`` in tests).
    clock: Clock = field(default_factory=SystemClock)
    #: How the scheduler fires due schedules (``enabled=False``: not in this process).
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)


@dataclass(frozen=True, slots=True)
class Forgotten:
    """What ``App.forget`` did: keys destroyed, read-model rows its hooks changed."""

    keys: int
    rows: int


_frozen = False


def _freeze_once() -> None:
    global _frozen
    if not _frozen:
        _frozen = True
        # The young generations only: a full collection walks the whole start-up heap
        # (~90 ms with pyarrow and pandas loaded) to find a few dozen objects of garbage,
        # which stay frozen with the rest.
        gc.collect(1)
        gc.freeze()


def default_service() -> str | None:
    """The ``_service`` of events when ``App(service=...)`` is not given.

    The ``REVENTLESS_SERVICE`` environment variable, else the main program's name
    (``python -m shop.api`` -> ``shop.api``, ``python worker.py`` -> ``worker``), else the
    host name: a deployment names its service without code, processes sharing a store in
    development are told apart by program, and an event always says where it came from.
    A name that is not valid metadata (empty, too long, not printable) is passed over.

    Example::

        os.environ["REVENTLESS_SERVICE"] = "billing"
        assert rv.App(store="sqlite://").service == "billing"
    """
    main = sys.modules.get("__main__")
    spec = None if main is None else main.__spec__
    argv0 = sys.argv[0] if sys.argv else ""
    candidates = (
        os.environ.get("REVENTLESS_SERVICE"),
        spec.name.removesuffix(".__main__") if spec is not None else None,
        os.path.splitext(os.path.basename(argv0))[0] if argv0 not in ("", "-c", "-m") else None,
        socket.gethostname(),
    )
    for name in candidates:
        if name:
            try:
                return Metadata(service=name).service
            except MetadataError:
                continue
    return None


class App:
    """Declare logs, topics and collectors; ``async with app`` builds and runs them.

    ``store`` is a SQLAlchemy URL (``sqlite:///file.db`` default, ``sqlite://`` in
    memory, ``postgresql+psycopg://...``); ``broker`` is ``memory://`` (default),
    ``nats://...`` or ``sns+sqs://...`` (extras), or a Broker instance. ``service`` is
    the ``_service`` every event carries unless its metadata names one; without it,
    ``default_service()`` (``REVENTLESS_SERVICE``, else the program's name, else the host).
    """

    def __init__(
        self,
        store: str = "sqlite:///reventless.db",
        broker: str | Broker = "memory://",
        *,
        service: str | None = None,
        options: AppOptions | None = None,
    ) -> None:
        self.options = options or AppOptions()
        # an invalid name fails here, not on the first append
        self.service = default_service() if service is None else Metadata(service=service).service
        self.store: Store = open_store(store, self.options.store)
        self.broker: Broker = open_broker(broker) if isinstance(broker, str) else broker
        self._topics: dict[str, Topic] = {}
        self._logs: dict[type[Aggregate], EventLog[Any]] = {}
        self._components: dict[str, Component] = {}
        self._collectors: dict[str, Collector] = {}
        self._tables: dict[str, ReadModelStore[Any]] = {}
        self._relay: Relay | None = None
        self._topology: Topology | None = None
        self._started = False
        self._scheduler = Scheduler(
            self.store,
            self.log_for,
            lambda: [log_.name for log_ in self._logs.values()],
            clock=self.options.clock,
            options=self.options.scheduler,
        )

    # -- declaring (no I/O) ----------------------------------------------------------------

    def _declare(self, topic: Topic) -> None:
        if self._started:
            raise SpecError("declare topics before the App starts")
        if topic.name in self._topics:
            raise SpecError(f"topic {topic.name!r} is declared twice")
        self._topics[topic.name] = topic

    def event_log(
        self,
        spec: type[A],
        *,
        topic: str | None = None,
        tenant: str | None = None,
        partitions: int | None = None,
        options: LogOptions | None = None,
        compression: Compression = "none",
    ) -> EventLog[A]:
        """Declare the log of aggregate ``spec`` (built when the App starts).

        ``partitions`` (default ``AppOptions.partitions``) is fixed when the topic is
        first created; collector groups share a topic by partition. ``compression``
        (``"lz4"``, ``"zstd"``) compresses its broker payloads and Parquet exports."""
        if not (isinstance(spec, type) and issubclass(spec, Aggregate)) or spec is Aggregate:
            raise SpecError(f"event_log expects an Aggregate subclass, got {spec!r}")
        if spec in self._logs:
            return self._logs[spec]
        name = topic or spec.topic_name
        definition = TopicDef(
            name,
            TopicSchema.from_events(
                name, [*spec.event_classes, *retired_models(spec.event_classes)]
            ),
            "aggregate",
            tenant,
            partitions=partitions or self.options.partitions,
            compression=compression,
        )
        log_ = EventLog(
            spec,
            definition,
            options=options or self.options.log,
            service=self.service,
            clock=self.options.clock,
            targets=self._target_topic,
        )
        self._declare(log_)
        self._logs[spec] = log_
        return log_

    def topic(
        self,
        name: str,
        *,
        schema: pa.Schema | None = None,
        model: type[BaseModel] | None = None,
        tenant: str | None = None,
        key: str | None = None,
        partitions: int | None = None,
        compression: Compression = "none",
    ) -> Topic:
        """Declare a schema topic from an Arrow schema or a pydantic model.

        ``key`` names the column whose value is the row's aggregate id: rows of one key
        stay in order, in one of ``partitions`` partitions. ``compression`` (``"lz4"``,
        ``"zstd"``) compresses its broker payloads and Parquet exports.
        """
        if (schema is None) == (model is None):
            raise SpecError("topic() takes exactly one of schema= or model=")
        ts = (
            TopicSchema.from_arrow(name, schema)
            if schema is not None
            else TopicSchema.from_model(name, model)  # type: ignore[arg-type]
        )
        if key is not None and key not in {c.name for c in ts.columns}:
            raise SpecError(f"topic {name!r}: key {key!r} is not a column")
        kind: TopicKind = "arrow" if schema is not None else "model"
        parts = partitions or self.options.partitions
        definition = TopicDef(name, ts, kind, tenant, key, parts, compression)
        t = Topic(definition, service=self.service)
        self._declare(t)
        return t

    def dcb_log(
        self,
        name: str,
        *,
        events: Any,
        partitions: int = 1,
        tenant: str | None = None,
        compression: Compression = "none",
    ) -> DcbLog:
        """Declare a DCB log: a topic of the ``events`` union (``A | B | C``) without
        aggregate ids, read by query and appended to under a condition (``rv.DcbLog``).
        Collectors, predicates, the relay and Spark see it like any topic. With several
        ``partitions``, an event goes to the partition of its first tag. ``compression``
        (``"lz4"``, ``"zstd"``) compresses its broker payloads and Parquet exports."""
        members = union_members(events, f"dcb_log {name!r}")
        definition = TopicDef(
            name,
            TopicSchema.from_events(name, [*members, *retired_models(members)], tags=True),
            "dcb",
            tenant,
            partitions=partitions,
            compression=compression,
        )
        log_ = DcbLog(definition, members, service=self.service)
        self._declare(log_.topic)
        return log_

    @overload
    def collect(self, component: ReadModel[R]) -> Projection[R]: ...

    @overload
    def collect(self, component: EventMapper | SideEffectHandler) -> CollectorHandle: ...

    def collect(self, component: Component) -> CollectorHandle:
        """Run ``component`` in this App (a durable, named subscription)."""
        if self._started:
            raise SpecError("collect components before the App starts")
        if component.name in self._components:
            raise SpecError(f"a component named {component.name!r} is already collected")
        self._components[component.name] = component
        if isinstance(component, ReadModel):
            return Projection(self, component)
        return CollectorHandle(self, component)

    def _target_topic(self, target: type[Aggregate] | str) -> str:
        return self.log_for(target).name

    def log_for(self, target: type[Aggregate] | str) -> EventLog[Any]:
        """The EventLog of an aggregate spec or topic name."""
        if isinstance(target, str):
            t = self._topics.get(target)
            if isinstance(t, EventLog):
                return t
        elif target in self._logs:
            return self._logs[target]
        raise SpecError(f"no EventLog for {target!r} in this App")

    # -- building and running --------------------------------------------------------------

    async def start(self) -> None:
        """Open the store, build every topic atomically, start relay and collectors."""
        if self._started:
            return
        telemetry.refresh()  # providers set up since the import are used from now on
        topology = self._topology = Topology.of(self)
        dispatches = {n: topology.dispatch(n) for n in self._components}
        filters = {n: topology.filters(n) for n in self._components}
        self._check_order()
        await self.store.open()
        if any(t.schema.personal for t in self._topics.values()):
            try:  # no master key: KeyringError now (nothing built), not at the first event
                self.store.keyring.require()
            except BaseException:
                await self.store.close()
                raise
        created: list[str] = []
        declared: list[str] = []
        try:
            await self.broker.connect()
            for t in self._topics.values():
                if await self.store.register(t.definition):
                    created.append(t.name)
                await self.broker.declare(t.name)
                declared.append(t.name)
                t.attach(self.store)
        except BaseException:
            await self._undo(created, declared)
            raise
        self._started = True
        defs = {n: t.definition for n, t in self._topics.items()}
        probe_without_pandas()  # (pyarrow would import pandas to ask whether it is there)
        for d in defs.values():  # pyarrow's lazy set-up now, not at the first event
            empty = decode_batch(encode_batch(d.schema.to_arrow([]), d.compression))
            d.schema.from_arrow_rows(empty, with_meta=True)
        if self.options.publish:
            self._relay = Relay(
                self.store,
                self.broker,
                defs,
                retry_interval=self.options.relay_retry_interval,
                orphan_after=self.options.relay_orphan_after,
            )
            await self._relay.start()
        for name, comp in self._components.items():
            kw: dict[str, Any] = {
                "store": self.store,
                "broker": self.broker,
                "topics": {t: defs[t] for t in dispatches[name]},
                "dispatch": dispatches[name],
                "options": self.options.collector,
                "filters": filters[name],
            }
            collector: Collector
            if isinstance(comp, ReadModel):
                table = self.store.read_model(comp)
                await table.create()
                self._tables[name] = table
                collector = ReadModelCollector(comp, table, **kw)
            elif isinstance(comp, EventMapper):
                collector = MapperCollector(comp, self.log_for, clock=self.options.clock, **kw)
            elif isinstance(comp, SideEffectHandler):
                collector = SideEffectCollector(
                    comp, resolve=self.log_for, clock=self.options.clock, **kw
                )
            else:  # pragma: no cover - Component is only subclassed here
                raise SpecError(f"unknown component kind {comp!r}")
            self._collectors[name] = collector
        if self.options.gc_freeze:
            # before the collectors start: their first catch-up (a backlog) runs in start
            _freeze_once()
        await asyncio.gather(*(c.start() for c in self._collectors.values()))
        await self._scheduler.start()
        log.info(
            "app started: %d topic(s), %d collector(s)",
            len(defs),
            len(self._collectors),
            extra=telemetry.fields("app"),
        )

    def _check_order(self) -> None:
        """A component that needs per-aggregate order may not run on an unordered channel
        (an adapter that can be unordered is ``OrderAware``)."""
        if not isinstance(self.broker, OrderAware):
            return
        in_order = self.broker.delivers_in_order
        for name, comp in self._components.items():
            if comp.ordered and not all(in_order(g) for g in self.topology().groups(name)):
                raise SpecError(
                    f"{name} needs per-aggregate order, but the broker delivers its group "
                    "unordered: use an ordered (FIFO) channel, or declare the component with "
                    "ordered=False if its handlers do not depend on order"
                )

    async def _undo(self, created: list[str], declared: list[str]) -> None:
        """A failed build leaves nothing behind: tables and registry rows created now,
        and the broker state declared now (where the adapter can undo it)."""
        broker = self.broker
        for name in reversed(declared):
            if isinstance(broker, Undeclaring) and name in created:
                try:
                    await broker.undeclare(name)
                except ReventlessError:
                    log.exception("could not undo the broker state of topic %s", name)
        for name in reversed(created):
            try:
                await self.store.unregister(name)
            except ReventlessError:
                log.exception("could not undo topic %s", name)
        await self.store.close()
        with contextlib.suppress(Exception):
            await self.broker.close()

    async def stop(self) -> None:
        """Stop collectors and relay, then close broker and store."""
        if not self._started:
            return
        await self._scheduler.stop()
        for c in self._collectors.values():
            await c.stop()
        if self._relay is not None:
            await self._relay.stop()
        await self.broker.close()
        await self.store.close()
        self._collectors.clear()
        # Cached aggregate states go (a restart reloads them): what an App stopped for
        # good keeps alive is then only itself, even where ``gc_freeze`` froze it at start
        # (the first App of a process) and its reference cycles are never collected.
        for log_ in self._logs.values():
            log_.forget()
        self._started = False
        log.info("app stopped", extra=telemetry.fields("app"))

    async def __aenter__(self) -> App:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def settle(self, timeout: float = 60.0) -> None:
        """Wait until every collector has processed everything (including what mappers
        cause in turn). Handy in tests, demos and scripts. Raises
        ``ResnapshotRequiredError`` if a collector stopped behind the retained horizon."""

        names = list(self._topics)

        def caught_up(heads: dict[tuple[str, int], int]) -> bool:
            for c in self._collectors.values():
                c.check_resnapshot()  # a stopped partition would never catch up
            return all(
                cp >= heads.get(key, 0)
                for c in self._collectors.values()
                for key, cp in c.checkpoints.items()
            )

        def maybe_done() -> bool:  # cheap in-memory check before asking the store
            known = self.store.known_heads
            return all(
                max((cp for (t, _), cp in c.checkpoints.items() if t == topic), default=0)
                >= known.get(topic, 0)
                for c in self._collectors.values()
                for topic in c.topics
            )

        async def wait() -> None:
            rounds = 0
            while True:
                rounds += 1
                if maybe_done() or rounds % 20 == 0:  # members of a group see part of a topic
                    heads = await self.store.partition_heads(names)
                    if caught_up(heads) and heads == await self.store.partition_heads(names):
                        return
                await asyncio.sleep(0.005)

        async with asyncio.timeout(timeout):
            await wait()

    def topology(self) -> Topology:
        """The derived shape of this App's collectors (dispatch, filters, consumer groups,
        channels): fixed once the App started, else computed from the declarations now."""
        return self._topology if self._topology is not None else Topology.of(self)

    @property
    def relay(self) -> Relay | None:
        """The outbox relay of this process once started (``published`` positions,
        ``unheard`` rows no subscriber would have received); None before ``start`` and
        with ``AppOptions(publish=False)``."""
        return self._relay

    @property
    def scheduler(self) -> Scheduler:
        """The scheduler of this App: fires due scheduled commands (``pending``, ``dead``,
        ``redrive``, ``cancel``; ``advance`` with a ``ManualClock`` in tests)."""
        return self._scheduler

    @property
    def collectors(self) -> Mapping[str, Collector]:
        """The running collectors by component name (empty before ``start``)."""
        return MappingProxyType(self._collectors)

    @property
    def tables(self) -> Mapping[str, ReadModelStore[Any]]:
        """The built read-model tables by name (empty before ``start``)."""
        return MappingProxyType(self._tables)

    def collector(self, name: str) -> Collector:
        """The running collector named ``name``."""
        try:
            return self._collectors[name]
        except KeyError:
            raise SpecError(f"no running collector {name!r}") from None

    async def dead_letters(self, component: str | None = None) -> list[DeadLetter]:
        """Open dead letters (of one component, or all): the events handlers gave up on,
        then the broker messages a broker dead-lettered (adapters that have a dead-letter
        queue are ``DeadLetterQueues``; those rows have ``id`` 0)."""
        letters = await self.store.collectors.dead_letters(component)
        broker = self.broker
        if isinstance(broker, DeadLetterQueues) and self._started:
            for name in [component] if component is not None else list(self._components):
                if name in self._components:
                    for group in self.topology().groups(name):
                        letters.extend(await broker.dead_letters(group))
        return letters

    async def redrive(self, component: str, aggregate_id: str | None = None) -> RedriveReport:
        """Retry a component's dead letters per aggregate, in offset order. A broker with a
        dead-letter queue (``DeadLetterQueues``) first moves its messages back, in order."""
        collector = self.collector(component)
        broker = self.broker
        if isinstance(broker, DeadLetterQueues) and aggregate_id is None:
            moved = 0
            for group in self.topology().groups(component):
                moved += await broker.redrive(group)
            if moved:
                log.info("%s: %d broker dead letter(s) moved back to its queue", component, moved)
        return await collector.redrive(aggregate_id)

    async def forget(self, subject: str) -> Forgotten:
        """Forget a data subject (crypto-shredding): destroy its key, so every personal
        field sealed with it (``rv.Personal``) reads as ``rv.ERASED`` from now on, in the
        store, broker messages, exports and Spark alike; drop this process's cached
        aggregate states; then run each read model's ``on_forget`` hook, overwriting the
        rows it changes. Other processes stop opening the subject's data when their
        cached key expires (``Keyring.ttl``, 30 s by default). Forgetting a subject
        without a key (none yet, or forgotten already) still runs the hooks.

        Example::

            await app.forget("c-1")
        """
        if not self._started:
            raise SpecError("forget needs a started App (async with app: ...)")
        if not isinstance(subject, str) or not subject:
            raise MetadataError(f"forget needs a subject id, got {subject!r}")
        keyring = self.store.keyring
        keys = await keyring.forget(subject)
        for log_ in self._logs.values():
            if log_.schema.personal:
                log_.forget()
        rows = 0
        for name, comp in self._components.items():
            hook = comp.forget_hook if isinstance(comp, ReadModel) else None
            if hook is None:
                continue
            table = self._tables[name]
            args: tuple[Any, ...] = (subject,)
            if hook.wants_current:
                args = (subject, await table.get(subject))
            changed: dict[Any, Any] = {}
            for op in as_ops(await call(hook, *args)):
                if isinstance(op, Upsert):
                    changed[table.key_of(op.row)] = op.row
                elif isinstance(op, Delete):
                    changed[op.key] = None
                else:
                    raise SpecError(f"{name}: on_forget returned {op!r}, not Upsert/Delete")
            await table.write_erasing(changed)
            rows += len(changed)
        if rows:
            await keyring.purge()
        log.info("forgot a data subject: %d key(s) destroyed, %d row(s) erased", keys, rows)
        return Forgotten(keys, rows)

    @property
    def topics(self) -> dict[str, Topic]:
        """Declared topics by name."""
        return dict(self._topics)

    @property
    def components(self) -> Mapping[str, Component]:
        """Collected components by name, in the order they were collected (read-only)."""
        return MappingProxyType(self._components)
