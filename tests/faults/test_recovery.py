"""Focused tests of the fixes the network fault tests led to (``test_network_faults.py``):
each shows one failure mode on its own, with the smallest setup that has it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import reventless as rv
from reventless.store import StoreOptions
from reventless.store.database import Database
from reventless.testing.broker_suite import until
from tests.faults.proxy import FaultProxy
from tests.model import Counter, Increment, Incremented, totals
from tests.moto_server import MotoServer, aws_url
from tests.nats_server import NatsServer

# -- the store's timeout ------------------------------------------------------------------


def test_the_timeout_option_bounds_connecting_too() -> None:
    db = Database("postgresql+psycopg://u@db/shop?timeout=2.5")
    assert db.timeout == 2.5
    assert db.url.query == {"connect_timeout": "3"}  # libpq takes whole seconds
    assert Database("postgresql+psycopg://u@db/shop").timeout == StoreOptions().timeout
    kept = Database("postgresql+psycopg://u@db/shop?connect_timeout=7", StoreOptions(timeout=1))
    assert (kept.timeout, kept.url.query) == (1, {"connect_timeout": "7"})
    unbounded = Database("postgresql+psycopg://u@db/shop?timeout=0")
    assert (unbounded.timeout, unbounded.url.query) == (None, {})
    assert Database("sqlite:///x.db?timeout=5").timeout is None  # a local file: busy_timeout
    with pytest.raises(rv.StoreError, match="timeout must be a number"):
        Database("postgresql+psycopg://u@db/shop?timeout=soon")


@pytest.mark.postgres
async def test_a_silent_postgres_fails_reads_and_writes_within_the_timeout(
    pg_url: str, pg_proxy: FaultProxy
) -> None:
    db = Database(pg_proxy.route(pg_url) + "&timeout=1")
    await db.open()
    try:

        def one(conn: object) -> int:
            return 1

        assert await db.read(one) == await db.write(one) == 1
        pg_proxy.blackhole()  # the connections stay open; nothing answers
        for call in (db.read, db.write):
            started = time.monotonic()
            with pytest.raises(rv.StoreError, match="did not answer within 1 s"):
                await call(lambda c: c.exec_driver_sql("SELECT 1").scalar())
            assert time.monotonic() - started < 1.9
        pg_proxy.heal()
        assert await db.read(lambda c: c.exec_driver_sql("SELECT 2").scalar()) == 2
        assert await db.write(lambda c: c.exec_driver_sql("SELECT 3").scalar()) == 3
    finally:
        await db.close()


@pytest.mark.postgres
@pytest.mark.timeout(60)
async def test_a_read_whose_caller_left_still_times_out(pg_url: str, pg_proxy: FaultProxy) -> None:
    """A read on a half-open connection whose caller was cancelled (an App stopping): its
    worker thread comes free at the deadline, so closing the store does not hang."""
    db = Database(pg_proxy.route(pg_url) + "&timeout=1")
    await db.open()
    assert await db.read(lambda c: c.exec_driver_sql("SELECT 1").scalar()) == 1
    pg_proxy.half_open()
    read = asyncio.create_task(db.read(lambda c: c.exec_driver_sql("SELECT 2").scalar()))
    await asyncio.sleep(0.2)  # the read is on its way (into the void)
    read.cancel()
    started = time.monotonic()
    await db.close()
    assert time.monotonic() - started < 5


@pytest.mark.postgres
async def test_a_silent_postgres_fails_appends_within_the_timeout(
    pg_url: str, pg_proxy: FaultProxy
) -> None:
    app = rv.App(store=pg_proxy.route(pg_url) + "&timeout=1")
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment())  # loaded: the next call only appends
        pg_proxy.half_open()  # PostgreSQL forgot the connection; the App's socket hangs
        started = time.monotonic()
        with pytest.raises(rv.StoreError, match="did not answer within 1 s"):
            await log.execute("a", Increment(), command_id="second")
        assert time.monotonic() - started < 1.9
        # Each connection the App holds finds out the same way (within the timeout), then
        # a new one works: the caller retries with the command's id.
        for _ in range(8):
            try:
                again = await log.execute("a", Increment(), command_id="second")
                break
            except rv.StoreError:
                continue
        else:
            pytest.fail("the store did not come back")
        log.forget()
        assert (await log.load("a")).value == again.version == 2  # landed once


@pytest.mark.postgres
async def test_an_unreachable_postgres_is_a_store_error(pg_url: str, pg_proxy: FaultProxy) -> None:
    app = rv.App(store=pg_proxy.route(pg_url))
    log = app.event_log(Counter)
    async with app:
        await log.execute("a", Increment())
        pg_proxy.reset()
        pg_proxy.refuse()
        for _ in range(2):  # the connection is found dead, then a new one is refused
            with pytest.raises(rv.StoreError):  # not the driver's error
                await log.execute("a", Increment())
        pg_proxy.heal()
        await log.execute("a", Increment())


# -- the store's append queue -------------------------------------------------------------


@pytest.mark.postgres
async def test_a_caller_that_gives_up_does_not_strand_the_others(
    pg_url: str, pg_proxy: FaultProxy
) -> None:
    """A caller cancelled (a request timeout) while its append is in flight: the append
    lands anyway, and the callers that shared its group commit get their answers."""
    app = rv.App(store=pg_proxy.route(pg_url))
    log = app.event_log(Counter)
    async with app:
        ids = [f"c-{i}" for i in range(20)]
        await log.execute_many([(i, Increment()) for i in ids])  # loaded: calls only append
        pg_proxy.delay(0.3)
        sent = pg_proxy.forwarded["up"]
        calls = [asyncio.create_task(log.execute(i, Increment())) for i in ids]
        await until(lambda: pg_proxy.forwarded["up"] > sent)  # the group is at the server
        calls[3].cancel()  # its answer is 0.3 s away
        outcomes = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)
        assert isinstance(outcomes[3], asyncio.CancelledError)
        assert all(isinstance(o, rv.ExecuteResult) for i, o in enumerate(outcomes) if i != 3)
        pg_proxy.heal()
        assert await log.head() == 40  # the cancelled caller's append landed too


# -- collectors --------------------------------------------------------------------------


class Copied(rv.Event):
    source: int


class Copy(rv.Command):
    source: int


class Copies(rv.Aggregate):
    events = Copied

    @rv.handles(Copy)
    def take(self, cmd: Copy) -> Copied:
        return Copied(source=cmd.source)

    @rv.applies(Copied)
    def _copied(self, e: Copied) -> None:
        pass


async def test_a_store_error_in_a_mappers_command_is_retried_not_dead_lettered(
    file_url: str,
) -> None:
    """The store failing the command a mapper sends (an outage outlasting the mapper's
    quick attempts) is not the handler's fault: the batch is redone once the store is
    back, instead of dead-lettering the event and parking its aggregate."""
    copier = rv.EventMapper("copier")

    @copier.on(Incremented)
    def _copy(ev: rv.Envelope[Incremented]) -> rv.Send:
        return rv.Send(Copies, "all", Copy(source=ev.offset))

    options = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=0.05, grace=0.01))
    app = rv.App(store=file_url, options=options)
    app.event_log(Counter)
    copies = app.event_log(Copies)
    app.collect(copier)
    async with app:
        execute = copies.execute
        failures = 0

        async def flaky(*args: Any, **kwargs: Any) -> rv.ExecuteResult:
            nonlocal failures
            if failures < 5:  # more than the mapper's attempts (3)
                failures += 1
                raise rv.StoreError("the store went away")
            return await execute(*args, **kwargs)

        copies.execute = flaky  # type: ignore[method-assign]
        await app.log_for(Counter).execute("a", Increment())
        await app.log_for(Counter).execute("a", Increment())
        await app.settle(timeout=10)
        assert await app.dead_letters() == []
        assert [e.event.source for e in await copies.read()] == [1, 2]  # once each


# -- the relay ----------------------------------------------------------------------------


async def test_the_relay_outlives_a_store_error_recording_its_position(file_url: str) -> None:
    app = rv.App(store=file_url, broker="memory://")
    log = app.event_log(Counter)
    app.collect(totals)  # a subscriber: the relay publishes
    async with app:
        positions = app.store.relay_positions
        record = positions.advance
        failures = 0

        async def advance(moved: Mapping[str, int]) -> None:
            nonlocal failures
            if failures == 0:
                failures += 1
                raise rv.StoreError("the store went away")
            await record(moved)

        positions.advance = advance  # type: ignore[method-assign,assignment]
        await log.execute("a", Increment())
        await until(lambda: failures == 1)  # the relay's position write failed once
        await log.execute("a", Increment())
        relay = app.relay
        assert relay is not None
        await until(lambda: relay.published["Counter"] == 2)  # still publishing


class SlowBroker(rv.InMemoryBroker):
    """An in-memory broker with a round trip per publish (a broker far away) and a
    consumer of every topic."""

    def has_subscribers(self, topic: str) -> bool:
        return True

    async def publish(self, messages: Sequence[rv.Message]) -> None:
        await asyncio.sleep(0.01)
        await super().publish(messages)


class Noted(rv.Event):
    pass


class Note(rv.Command):
    pass


class Notebook(rv.Aggregate):
    events = Noted

    @rv.handles(Note)
    def note(self, cmd: Note) -> Noted:
        return Noted()

    @rv.applies(Noted)
    def _noted(self, e: Noted) -> None:
        pass


async def test_a_busy_topic_does_not_starve_the_relay_of_the_others(file_url: str) -> None:
    app = rv.App(store=file_url, broker=SlowBroker())
    busy, quiet = app.event_log(Counter), app.event_log(Notebook)
    stop = asyncio.Event()

    async def write() -> None:  # commits faster than a publish round trip
        while not stop.is_set():
            await busy.execute("a", Increment())

    async with app:
        relay = app.relay
        assert relay is not None
        writer = asyncio.create_task(write())
        await until(lambda: relay.published["Counter"] > 0)
        await quiet.execute("n", Note())
        try:
            await until(lambda: relay.published["Notebook"] == 1)  # while Counter is busy
        finally:
            stop.set()
            await writer


# -- the brokers --------------------------------------------------------------------------


async def publish_until_taken(broker: rv.Broker, message: rv.Message, timeout: float) -> None:
    """The relay's way: publish again until the broker takes the message."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                await broker.publish([message])
                return
            except rv.BrokerError:
                continue


def note(i: int) -> rv.Message:
    return rv.Message(topic="r", data=b"%d" % i, msg_id=f"r-{i}", key="0")


@pytest.mark.nats
async def test_a_half_open_nats_connection_is_replaced(nats_server: NatsServer) -> None:
    """The server forgot the connection, the client's socket stays open: the client's
    PINGs (``ping_interval``) find it stale and it reconnects; publishes and the fetch
    loop carry on. nats-py's default would notice after about 6 minutes."""
    from reventless_nats import JetStreamBroker

    with FaultProxy(("127.0.0.1", nats_server.port)) as proxy:
        broker = JetStreamBroker.from_url(
            f"{proxy.route(nats_server.url)}?prefix=t{uuid.uuid4().hex[:10]}&ping_interval=0.2"
            "&publish_timeout=0.5&reconnect_wait=0.1&fetch_wait=0.3"
        )
        await broker.connect()
        got: list[bytes] = []

        async def handle(msgs: Sequence[rv.Message]) -> None:
            got.extend(m.data for m in msgs)

        try:
            await broker.subscribe("g", ["r"], handle)
            await broker.publish([note(0)])
            await until(lambda: got == [b"0"])
            proxy.half_open()
            await publish_until_taken(broker, note(1), timeout=10)
            await until(lambda: got == [b"0", b"1"])
        finally:
            await broker.close()


@pytest.mark.slow
@pytest.mark.aws
async def test_a_silent_sns_endpoint_fails_a_publish_within_its_timeouts(
    moto_server: MotoServer,
) -> None:
    """Nothing answers: each of the SDK's 3 attempts gives up after ``wait`` plus
    ``timeout`` seconds and the publish fails with ``BrokerError`` (the relay retries it);
    before, each attempt waited ``wait`` + 15 s (here: 15 s)."""
    from reventless_aws import SnsSqsBroker

    with FaultProxy(("127.0.0.1", moto_server.port)) as proxy:
        url = aws_url(moto_server, endpoint=proxy.route(moto_server.endpoint), wait=0, timeout=0.5)
        broker = SnsSqsBroker.from_url(url)
        await broker.connect()
        try:
            await broker.declare("r")
            await broker.publish([note(0)])
            proxy.blackhole()
            started = time.monotonic()
            with pytest.raises(rv.BrokerError):
                await broker.publish([note(1)])
            # 3 attempts of 0.5 s and the SDK's backoff; one attempt used to take 15 s
            assert time.monotonic() - started < 10
            proxy.heal()
            await publish_until_taken(broker, note(1), timeout=10)
        finally:
            await broker.close()
