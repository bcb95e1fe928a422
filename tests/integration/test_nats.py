"""An App on NATS JetStream: commands -> store -> relay -> JetStream -> read model.

Each test uses a private nats-server (the session one with its own stream prefix, or a
server of its own for the fault tests, which kill and restart it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.broker import Message
from reventless.testing.broker_suite import until
from tests.model import Counter, Increment, Total, totals
from tests.nats_server import NatsServer, nats_binary

pytestmark = pytest.mark.nats


@pytest.fixture
async def js(nats_url: str) -> AsyncIterator[Any]:
    """A plain nats-py JetStream context on the test server (to look at streams)."""
    import nats

    nc = await nats.connect(nats_url.split("?")[0])
    yield nc.jetstream()
    await nc.close()


async def stream_messages(js: Any, stream: str) -> list[Any]:
    info = await js.stream_info(stream)
    return [
        await js.get_msg(stream, seq)
        for seq in range(info.state.first_seq, info.state.last_seq + 1)
    ]


async def run_commands(log: rv.EventLog[Counter], n: int, workers: int = 8) -> dict[str, int]:
    expected: dict[str, int] = defaultdict(int)
    jobs = iter(range(n))

    async def worker() -> None:
        for i in jobs:
            agg, by = f"c-{i % 11}", i % 5 + 1
            await log.execute(agg, Increment(by=by))
            expected[agg] += by

    await asyncio.gather(*(worker() for _ in range(workers)))
    return dict(expected)


async def consumer_caught_up(js: Any, stream: str, durable: str) -> bool:
    info = await js.consumer_info(stream, durable)
    return bool(info.num_pending == 0 and info.num_ack_pending == 0)


async def test_events_reach_the_read_model_through_jetstream(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    # The store poll is the collectors' safety net; pushed far out here, so settling in
    # time means the batches came through JetStream.
    options = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=60, grace=60))
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=nats_url, options=options)
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        expected = await run_commands(log, 600)
        await app.settle(timeout=30)
        rows = {r.id: r for r in await view.all()}
        head = await log.head()
        assert {k: r.value for k, r in rows.items()} == expected
        assert sum(r.events for r in rows.values()) == head == 600

        # The stream really holds the events: contiguous ranges covering 1..head.
        broker = app.broker
        stream = broker.stream_name("Counter")  # type: ignore[attr-defined]
        assert stream.endswith("_Counter")
        msgs = await stream_messages(js, stream)
        ranges = [(int(m.headers["rv-first"]), int(m.headers["rv-last"])) for m in msgs]
        assert ranges[0][0] == 1 and ranges[-1][1] == head
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ranges))
        assert sum(int(m.headers["rv-count"]) for m in msgs) == head
        assert all(
            m.headers["Nats-Msg-Id"] == f"Counter:0:{a}-{b}"
            for m, (a, b) in zip(msgs, ranges, strict=True)
        )
        assert all(m.subject.startswith(stream.split("_")[0].lower() + ".Counter.") for m in msgs)
        await asyncio.wait_for(_poll(lambda: consumer_caught_up(js, stream, "counter_totals")), 10)


async def _poll(check: Any) -> None:
    while not await check():
        await asyncio.sleep(0.05)


async def test_duplicate_publish_is_suppressed_by_msg_id(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=nats_url)
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        await run_commands(log, 200)
        await app.settle(timeout=30)
        before = {r.id: r for r in await view.all()}
        broker: Any = app.broker
        stream = broker.stream_name("Counter")
        count = (await js.stream_info(stream)).state.messages
        first = (await stream_messages(js, stream))[0]

        # The relay re-sends a range it already published (e.g. after a crash).
        resend = Message(
            topic="Counter",
            data=first.data,
            msg_id=first.headers["Nats-Msg-Id"],
            headers={k: v for k, v in first.headers.items() if k.startswith("rv-")},
            key="Counter",
        )
        await broker.publish([resend, resend])
        assert broker.duplicates_dropped == 2
        assert (await js.stream_info(stream)).state.messages == count

        # Under a new id it is stored and delivered, and the collector skips it.
        await broker.publish([dataclasses.replace(resend, msg_id="again")])
        assert (await js.stream_info(stream)).state.messages == count + 1
        await asyncio.wait_for(_poll(lambda: consumer_caught_up(js, stream, "counter_totals")), 10)
        await app.settle(timeout=30)
        assert {r.id: r for r in await view.all()} == before


async def test_killing_nats_mid_stream_loses_nothing(tmp_path: Path) -> None:
    server = NatsServer(nats_binary(), tmp_path / "nats")
    server.start()
    try:
        url = f"{server.url}?reconnect_wait=0.1&publish_timeout=2&fetch_wait=0.5&ack_wait=2"
        options = rv.AppOptions(relay_retry_interval=0.1)
        app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=url, options=options)
        log = app.event_log(Counter)
        view = app.collect(totals)
        expected: dict[str, int] = defaultdict(int)
        stop = asyncio.Event()
        sent = 0

        async def writer(w: int) -> None:
            nonlocal sent
            i = 0
            while not stop.is_set():
                agg, by = f"c-{(w + i) % 13}", (i % 3) + 1
                await log.execute(agg, Increment(by=by))
                expected[agg] += by
                sent += 1
                i += 1
                await asyncio.sleep(0.001)

        async with app:
            writers = [asyncio.create_task(writer(w)) for w in range(6)]
            await until(lambda: sent >= 300)
            server.kill()  # mid-stream: publishes and fetches in flight
            at_kill = sent
            await asyncio.sleep(1.5)  # commands keep committing while NATS is down
            assert sent > at_kill
            server.start()
            at_restart = sent
            await until(lambda: sent >= at_restart + 300, timeout=30)
            stop.set()
            await asyncio.gather(*writers)
            await app.settle(timeout=60)
            rows = await view.all()
            head = await log.head()
            assert head == sent
            assert {r.id: r.value for r in rows} == dict(expected)
            assert sum(r.events for r in rows) == head

            # The JetStream path recovered too: the relay re-published up to the head and
            # the collector's consumer drained the stream.
            import nats

            nc = await nats.connect(server.url)
            try:
                js = nc.jetstream()
                stream = app.broker.stream_name("Counter")  # type: ignore[attr-defined]

                async def tail_published() -> bool:
                    last = (await js.stream_info(stream)).state.last_seq
                    msg = await js.get_msg(stream, last)
                    return int(msg.headers["rv-last"]) == head

                await asyncio.wait_for(_poll(tail_published), 20)
                # A delivery whose ack died with the server is redelivered after ack_wait.
                await asyncio.wait_for(
                    _poll(lambda: consumer_caught_up(js, stream, "counter_totals")), 20
                )
            finally:
                await nc.close()
    finally:
        server.stop()


async def test_fetch_loop_survives_a_server_restart(tmp_path: Path) -> None:
    from reventless_nats import JetStreamBroker

    server = NatsServer(nats_binary(), tmp_path / "nats")
    server.start()
    b = JetStreamBroker.from_url(
        f"{server.url}?reconnect_wait=0.1&publish_timeout=1&fetch_wait=0.3"
    )
    await b.connect()
    got: list[bytes] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.data for m in msgs)

    def m(i: int) -> Message:
        return Message(topic="r", data=b"%d" % i, msg_id=f"r-{i}", key="k")

    try:
        await b.subscribe("g", ["r"], handle)
        await b.publish([m(i) for i in range(10)])
        await until(lambda: len(got) == 10)
        server.kill()
        await asyncio.sleep(1.0)  # the fetch loop keeps trying (no crash, no busy loop)
        server.start()
        for _ in range(100):  # the relay's way: retry until the broker takes it
            try:
                await b.publish([m(i) for i in range(10, 20)])
                break
            except rv.BrokerError:
                await asyncio.sleep(0.1)
        await until(lambda: {int(x) for x in got} == set(range(20)), timeout=20)
        pumps = list(b._pumps.values())
        assert pumps and all(p.task is not None and not p.task.done() for p in pumps)
    finally:
        await b.close()
        server.stop()


async def test_a_failed_build_leaves_no_stream_behind(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    from reventless_nats import JetStreamBroker

    class FailsOnCdc(JetStreamBroker):
        async def declare(self, topic: str) -> None:
            if topic == "cdc":
                raise rv.BrokerError("no room for cdc")
            await super().declare(topic)

    sep = "&" if "?" in nats_url else "?"
    broker = FailsOnCdc.from_url(f"{nats_url}{sep}prefix=fb")
    assert isinstance(broker, FailsOnCdc)
    store = f"sqlite:///{tmp_path / 'fb.db'}"
    app = rv.App(store=store, broker=broker)
    app.event_log(Counter)
    app.topic("cdc", model=Total)
    with pytest.raises(rv.BrokerError, match="no room"):
        await app.start()
    names = [s.config.name async for s in _streams(js)]
    assert broker.stream_name("Counter") not in names  # declared, then undone
    check = rv.App(store=store)
    await check.store.open()
    try:
        topics = await check.store.db.read(
            lambda c: list(c.exec_driver_sql("SELECT name FROM rv_topics"))
        )
    finally:
        await check.store.close()
    assert topics == []


async def _streams(js: Any) -> AsyncIterator[Any]:
    for info in await js.streams_info():
        yield info


async def test_pages_over_max_payload_are_split_not_dropped(
    tmp_path: Path, nats_url: str, js: Any
) -> None:
    """A commit whose page is larger than the server's max_payload (1 MiB) travels as
    several messages chained by rv-prev: nothing is dropped, nothing read from the store."""
    options = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=60, grace=60))
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=nats_url, options=options)
    log = app.event_log(Noted)
    seen: list[int] = []
    probe = rv.SideEffectHandler("big_probe")

    @probe.on(NoteAdded)
    def _saw(ev: rv.Envelope[NoteAdded]) -> None:
        assert ev.offset is not None
        seen.append(ev.offset)

    app.collect(probe)
    async with app:
        broker: Any = app.broker
        assert broker.max_message_bytes < 1 << 20
        await log.append(
            "n-1", [NoteAdded(text=f"{i:04d}" + "x" * 3000) for i in range(900)], expected_version=0
        )
        await app.settle(timeout=30)
        assert seen == list(range(1, 901))
        assert broker.oversized_dropped == 0
        msgs = await stream_messages(js, broker.stream_name("Noted"))
        assert len(msgs) > 2 and all(len(m.data) <= broker.max_message_bytes for m in msgs)
        prevs = [int(m.headers["rv-prev"]) for m in msgs]
        lasts = [int(m.headers["rv-last"]) for m in msgs]
        assert prevs == [0, *lasts[:-1]]  # chained


class NoteAdded(rv.Event):
    text: str


class Noted(rv.Aggregate):
    events = NoteAdded

    @rv.applies(NoteAdded)
    def _added(self, e: NoteAdded) -> None:
        pass
