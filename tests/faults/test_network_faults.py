"""Network faults between an App and its services, injected by ``FaultProxy``.

For each of PostgreSQL (the store), NATS and the moto server (the broker) the App talks
through a proxy while command callers run; the proxy adds latency, resets every
connection, blackholes traffic, half-opens connections and refuses connects, then heals.
Each test then reads the store (on its own connection, never through the App) and
proves the outcome: every command landed exactly once (callers retry failures with the
same command id), the read model is the fold of the log, the mapper's command landed
once per event, every side effect ran, nothing was dead-lettered, every collector is at
the head and the relay published everything. Progress is waited for as conditions
(calls returned, errors seen, the relay caught up), never as fixed sleeps.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import reventless as rv
from tests.faults.proxy import FaultProxy
from tests.faults.store_audit import (
    by_command,
    check_gapless,
    checkpoint,
    fold_totals,
    logged,
    query,
    totals_rows,
)
from tests.model import Counter, Increment, Incremented, totals
from tests.moto_server import MotoServer, aws_url
from tests.nats_server import NatsServer

pytestmark = pytest.mark.slow


# -- the application under test -----------------------------------------------------------


class Mirrored(rv.Event):
    source: int  # the offset of the Counter event it mirrors


class Mirror(rv.Command):
    source: int


class Shadow(rv.Aggregate):
    """What the mapper writes: one event per Counter increment."""

    events = Mirrored
    seen: int = 0

    @rv.handles(Mirror)
    def mirror(self, cmd: Mirror) -> Mirrored:
        return Mirrored(source=cmd.source)

    @rv.applies(Mirrored)
    def _mirrored(self, e: Mirrored) -> None:
        self.seen += 1


mirror = rv.EventMapper("mirror")


@mirror.on(Incremented)
def _mirror(ev: rv.Envelope[Incremented]) -> rv.Send:
    return rv.Send(Shadow, f"s-{ev.aggregate_id}", Mirror(source=ev.offset))


@dataclass
class Rig:
    """An App with the counter log, its read model, the mapper and a side effect that
    counts its runs per event offset."""

    app: rv.App
    log: rv.EventLog[Counter]
    effects: Tally[int] = field(default_factory=Tally)


def build(store: str, broker: str = "memory://", *, poll: float = 0.2) -> Rig:
    options = rv.AppOptions(
        collector=rv.CollectorOptions(poll_interval=poll, grace=min(poll, 0.05)),
        relay_retry_interval=0.1,
    )
    app = rv.App(store=store, broker=broker, options=options)
    tested = Rig(app, app.event_log(Counter))
    app.event_log(Shadow)
    app.collect(totals)
    app.collect(mirror)
    effect = rv.SideEffectHandler("effects")

    @effect.on(Incremented)
    def _count(ev: rv.Envelope[Incremented]) -> None:
        tested.effects[ev.offset] += 1

    app.collect(effect)
    return tested


# -- command callers ----------------------------------------------------------------------


@dataclass
class Callers:
    """Command callers: every command has its own id (also its correlation id); a call
    that fails is retried later with the same id, so each command must land once."""

    log: rv.EventLog[Counter]
    #: Seconds each caller waits between its commands.
    pace: float = 0.0
    #: command id -> (aggregate, amount)
    sent: dict[str, tuple[str, int]] = field(default_factory=dict)
    returned: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    errors: Tally[str] = field(default_factory=Tally)
    slowest: float = 0.0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def call(self, cid: str) -> bool:
        agg, by = self.sent[cid]
        started = time.monotonic()
        try:
            await self.log.execute(
                agg, Increment(by=by), command_id=cid, meta=rv.Metadata(correlation_id=cid)
            )
        except (rv.StoreError, rv.BrokerError) as exc:  # typed: never a driver's error
            self.errors[type(exc).__name__] += 1
            return False
        finally:
            self.slowest = max(self.slowest, time.monotonic() - started)
        self.returned.add(cid)
        return True

    async def _run(self, worker: int) -> None:
        i = 0
        while not self._stop.is_set():
            cid = f"w{worker}-{i}"
            self.sent[cid] = (f"c-{(worker + i) % 7}", i % 3 + 1)
            i += 1
            if not await self.call(cid):
                self.failed.append(cid)
                await asyncio.sleep(0.02)  # a caller's pause before its next command
            elif self.pace:
                await asyncio.sleep(self.pace)

    def start(self, workers: int = 6) -> None:
        self._tasks = [asyncio.create_task(self._run(w)) for w in range(workers)]

    async def until(self, cond: Callable[[], bool], timeout: float = 30.0) -> None:
        """Let the callers run until ``cond()`` holds."""
        async with asyncio.timeout(timeout):
            while not cond():
                for t in self._tasks:
                    if t.done():
                        t.result()  # a caller crashed: show why
                await asyncio.sleep(0.01)

    async def more(self, n: int = 40, timeout: float = 30.0) -> None:
        """Let the callers run until ``n`` more calls returned."""
        target = len(self.returned) + n
        await self.until(lambda: len(self.returned) >= target, timeout)

    async def stop_and_retry(self, timeout: float = 30.0) -> None:
        """Stop calling; send every failed command again until it returns."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        async with asyncio.timeout(timeout):
            for cid in self.failed:
                while not await self.call(cid):
                    await asyncio.sleep(0.05)
        assert self.returned == set(self.sent)


# -- proving the outcome ------------------------------------------------------------------


async def published(t: Rig, callers: Callers, timeout: float = 30.0) -> None:
    """Wait until the relay published everything committed by now (the broker path
    works again)."""
    relay = t.app.relay
    assert relay is not None
    heads = await t.app.store.heads()
    await callers.until(lambda: all(relay.published[n] >= h for n, h in heads.items()), timeout)


async def broker_faults(
    proxy: FaultProxy, t: Rig, callers: Callers, *, half_open_fails_publishes: bool
) -> None:
    """The broker tests' run: commands throughout; delay, reset, blackhole, half-open,
    then reset + refuse and heal, each followed by the relay publishing everything. A
    blackhole (and, where ``half_open_fails_publishes``, a half-open connection) is
    held until the relay has seen a publish fail."""
    relay = t.app.relay
    assert relay is not None
    callers.start()
    await callers.more(60)

    proxy.delay(0.05)
    await callers.more(40)
    await published(t, callers)
    proxy.heal()

    proxy.reset()
    await callers.more(40)
    await published(t, callers)

    failures = relay.failures
    proxy.blackhole()
    await callers.until(lambda: relay.failures > failures)
    proxy.heal()
    await callers.more(40)
    await published(t, callers)

    failures = relay.failures
    proxy.half_open()
    if half_open_fails_publishes:
        await callers.until(lambda: relay.failures > failures)
    await callers.more(40)
    await published(t, callers)

    proxy.reset()  # the broker is unreachable: connects are refused
    proxy.refuse()
    await callers.more(40)
    proxy.heal()
    await callers.more(40)
    await published(t, callers)


async def prove(t: Rig, callers: Callers, audit_url: str, *, effects_once: bool) -> None:
    """Read the store back and check every claim of the module docstring. Side effects
    run at least once; exactly once (``effects_once``) when the store had no fault, as
    then every batch's checkpoint commit succeeds."""
    app, store = t.app, t.app.store
    await app.settle(timeout=60)
    counter_table, shadow_table = store.table_of("Counter"), store.table_of("Shadow")
    events = await asyncio.to_thread(logged, audit_url, counter_table)
    check_gapless(events)
    landed = by_command(events)
    assert set(landed) == set(callers.sent)  # nothing lost, nothing foreign
    for cid, evs in landed.items():  # each command exactly once, as sent
        assert [(e.aggregate_id, e.by) for e in evs] == [callers.sent[cid]], cid
    head = len(events)
    assert await asyncio.to_thread(totals_rows, audit_url) == fold_totals(events)
    sources = await asyncio.to_thread(
        query, audit_url, f'SELECT "source" FROM {shadow_table} ORDER BY "source"'
    )
    assert [s for (s,) in sources] == [e.offset for e in events]  # mapped once each
    assert set(t.effects) == {e.offset for e in events}  # every side effect ran
    if effects_once:
        assert set(t.effects.values()) == {1}
    for component in ("counter_totals", "mirror", "effects"):
        assert await asyncio.to_thread(checkpoint, audit_url, component, "Counter") == head
    assert await app.dead_letters() == []
    relay = app.relay
    assert relay is not None
    heads = {"Counter": head, "Shadow": len(sources)}
    await callers.until(lambda: relay.published == heads)  # the relay caught up


# -- PostgreSQL ---------------------------------------------------------------------------


@pytest.mark.postgres
async def test_postgres_behind_a_faulty_network(pg_url: str, pg_proxy: FaultProxy) -> None:
    timeout = 2.0
    proxy = pg_proxy
    t = build(f"{proxy.route(pg_url)}&timeout={timeout:g}")
    callers = Callers(t.log)
    async with t.app:
        callers.start()
        await callers.more(60)

        proxy.delay(0.02)  # a slow link: slower, nothing fails
        await callers.more(40)
        proxy.heal()

        proxy.reset()  # every connection dies at once: typed errors, then reconnects
        await callers.more(40)

        failed = sum(callers.errors.values())
        proxy.blackhole()  # silence: callers fail after the store's timeout
        await callers.until(lambda: sum(callers.errors.values()) > failed)
        proxy.heal()
        await callers.more(40)

        proxy.half_open()  # the server forgot every connection; the App's sockets hang
        await callers.more(40)

        failed = sum(callers.errors.values())
        proxy.reset()  # the server is unreachable: connects are refused
        proxy.refuse()
        await callers.until(lambda: sum(callers.errors.values()) > failed)
        proxy.heal()
        await callers.more(40)

        await callers.stop_and_retry()
        await prove(t, callers, pg_url, effects_once=False)
    assert set(callers.errors) == {"StoreError"}
    # A call is bounded: its load, command lookup and append (queued behind a stuck
    # one) each give up within the timeout.
    assert callers.slowest < 4 * timeout, callers.slowest


# -- NATS ---------------------------------------------------------------------------------


async def stream_tail(server: NatsServer, stream: str) -> int:
    """The ``rv-last`` offset of the last message in ``stream`` (read past the proxy)."""
    import nats

    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream()
        last = (await js.stream_info(stream)).state.last_seq
        return int((await js.get_msg(stream, last)).headers["rv-last"])  # type: ignore[index]
    finally:
        await nc.close()


@pytest.mark.nats
async def test_nats_behind_a_faulty_network(tmp_path: Path, nats_server: NatsServer) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    with FaultProxy(("127.0.0.1", nats_server.port)) as proxy:
        broker = (
            f"{proxy.route(nats_server.url)}?prefix=t{uuid.uuid4().hex[:10]}&reconnect_wait=0.1"
            "&connect_timeout=1&publish_timeout=1&fetch_wait=0.3&ack_wait=2&backoff=0.05"
            "&ping_interval=0.5"
        )
        # The store poll (the collectors' safety net) is pushed out of the test: the
        # collectors are at the head at the end only if JetStream delivery recovered.
        t = build(store, broker, poll=600)
        callers = Callers(t.log, pace=0.01)
        async with t.app:
            # NATS: a reset makes the client reconnect (publishes and fetches in flight
            # fail); a blackhole times publish acks out (the relay retries from the
            # store); half-open, the server dropped the client while its socket hangs
            # until the pings notice
            await broker_faults(proxy, t, callers, half_open_fails_publishes=True)
            await callers.stop_and_retry()
            await prove(t, callers, store, effects_once=True)
            head = len(callers.sent)
            stream = t.app.broker.stream_name("Counter")  # type: ignore[attr-defined]
            assert await stream_tail(nats_server, stream) == head  # published for real
    assert not callers.errors  # the broker is behind the commit: commands never see it


# -- SNS/SQS on the moto server -----------------------------------------------------------


@pytest.mark.aws
async def test_sns_sqs_behind_a_faulty_network(tmp_path: Path, moto_server: MotoServer) -> None:
    store = f"sqlite:///{tmp_path / 'store.db'}"
    with FaultProxy(("127.0.0.1", moto_server.port)) as proxy:
        # wait=1, timeout=1: a call that hangs is given up after 2 s (3 attempts)
        broker = aws_url(moto_server, endpoint=proxy.route(moto_server.endpoint), timeout=1)
        t = build(store, broker, poll=600)  # the collectors are at the head via SQS only
        callers = Callers(t.log, pace=0.01)
        async with t.app:
            # SNS/SQS: a reset kills every HTTP connection (the SDK retries on new ones);
            # a blackhole hangs calls until the SDK's read timeout; half-open, pooled
            # connections hang until it times out and retries
            await broker_faults(proxy, t, callers, half_open_fails_publishes=False)
            await callers.stop_and_retry()
            await prove(t, callers, store, effects_once=True)
    assert not callers.errors
