"""Consumer groups with leases, on SQLite and PostgreSQL: concurrent workers (each with its
own connections) share the partitions, a worker that stops renewing is taken over and
cannot ack any more, no two workers hold a partition at once, acked events are never
processed again, and each partition is processed in offset order."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from reventless import partition_of
from reventless.subscribe import BadRequestError, LeaseLostError, Subscriptions
from tests.subscribe.conftest import order_rows, orders_app

TTL = 0.4


@dataclass
class Log:
    grants: list[tuple[int, int, str, float, float]] = field(default_factory=list)
    processed: list[tuple[str, int, int, int, float]] = field(default_factory=list)
    acks: list[tuple[str, int, int, int, float]] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    drops: list[tuple[int, int, float]] = field(default_factory=list)


async def _worker(
    url: str, sub_id: str, name: str, log: Log, stop: asyncio.Event, *, hang_after: float | None
) -> None:
    async with Subscriptions.from_url(url) as subs:
        member = subs.member(sub_id, name, ttl=TTL)
        first_held: float | None = None  # when it first held a lease
        held: dict[int, int] = {}
        while not stop.is_set():
            called = time.time()
            leases = await member.heartbeat()
            learned = time.time()
            for p, e in held.items():  # a lease released on rebalance ends at this call
                if leases.epochs.get(p) != e:
                    log.drops.append((p, e, called))
            held = dict(leases.epochs)
            if held and first_held is None:
                first_held = learned
            for p, e in leases.epochs.items():
                log.grants.append((p, e, name, learned, leases.expires_at))
            page = await member.poll(limit=15)
            last: dict[int, int] = {}
            for ev in page.events:
                if time.time() >= leases.expires_at:  # our lease may be gone: stop
                    break
                p = ev["partition"]
                log.processed.append((name, p, leases.epochs[p], ev["offset"], time.time()))
                last[p] = ev["offset"]
            if (
                hang_after is not None
                and first_held is not None
                and time.time() - first_held > hang_after
            ):
                # a stuck worker, once it has held leases for a while (on a loaded machine
                # the others may hold every partition for its first moments): no more
                # heartbeats; once its leases expired and were taken over, its late ack
                # must be refused
                await asyncio.sleep(TTL * 3)
                for p, off in last.items() or [(next(iter(leases.epochs), 0), 1)]:
                    with pytest.raises(LeaseLostError):
                        await member.ack(p, off, leases.epochs.get(p, 1))
                    log.lost.append(name)
                return
            for p, off in last.items():
                if time.time() >= leases.expires_at:  # too late to ack: the next holder redoes it
                    break
                try:
                    await member.ack(p, off, leases.epochs[p])
                except LeaseLostError:
                    # refused only once the lease had run out while the ack was on its way
                    assert time.time() >= leases.expires_at, "a live lease's ack was refused"
                    break
                log.acks.append((name, p, leases.epochs[p], off, time.time()))
            await asyncio.sleep(0.01)
        await member.leave()


async def test_workers_share_partitions_and_a_stuck_worker_is_taken_over(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=4)
    async with app:
        await topic.publish(order_rows(120, keys=16))
        async with Subscriptions(app.store.db) as subs:
            sub = await subs.create("orders")
            log, stop = Log(), asyncio.Event()
            workers = [
                asyncio.create_task(_worker(db_url, sub.id, n, log, stop, hang_after=h))
                for n, h in (("w1", None), ("w2", None), ("stuck", 0.3))
            ]
            for i in range(6):  # more events while the group runs
                await topic.publish(order_rows(20, start=120 + 20 * i, keys=16))
                await asyncio.sleep(0.1)
            heads = {p: 0 for p in range(4)}
            for r in await topic.read(1, 1000):
                p = partition_of(r.aggregate_id, 4)
                heads[p] = max(heads[p], r.offset)

            async def drained() -> None:
                while True:
                    st = await subs.status(sub.id)
                    if len(st.partitions) == 4 and all(
                        x["acked"] == heads[x["partition"]] for x in st.partitions
                    ):
                        return
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(drained(), 30)
            stop.set()
            await asyncio.gather(*workers)

    assert log.lost == ["stuck"] * len(log.lost) and log.lost, "the stuck worker's ack was refused"
    # no two owners at once: a worker believes it holds a lease from the heartbeat's return
    # until its expiry or the heartbeat that released it; epochs of a partition never overlap
    spans: dict[tuple[int, int], list[float]] = {}
    owner: dict[tuple[int, int], str] = {}
    for p, e, name, start, end in log.grants:
        s = spans.setdefault((p, e), [start, end])
        s[0], s[1] = min(s[0], start), max(s[1], end)
        assert owner.setdefault((p, e), name) == name
    for p, e, t in log.drops:
        spans[(p, e)][1] = min(spans[(p, e)][1], t)
    for (p, e), (start, _) in spans.items():
        prev = [end for (q, f), (_, end) in spans.items() if q == p and f < e]
        assert all(end < start for end in prev), f"partition {p} epoch {e} overlaps"
    assert {n for n in owner.values()} >= {"w1", "w2", "stuck"}
    # every event processed; none processed again after it was acked
    assert {o for _, _, _, o, _ in log.processed} == set(range(1, 241))
    acked_at: dict[int, float] = {}
    for _, p, _, off, t in log.acks:
        for o in [x for _, q, _, x, _ in log.processed if q == p and x <= off]:
            acked_at[o] = min(acked_at.get(o, t), t)
    for _, _, _, o, t in log.processed:
        assert t <= acked_at.get(o, float("inf")), f"offset {o} processed after its ack"
    # per partition and epoch, offsets are processed in order
    seq: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for name, p, e, o, _ in log.processed:
        seq[(name, p, e)].append(o)
    for offsets in seq.values():
        assert offsets == sorted(offsets)


async def test_leases_rebalance_and_bad_input(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=4)
    async with app, Subscriptions(app.store.db) as subs:
        await topic.publish(order_rows(8))
        sub = await subs.create("orders")
        a, b = subs.member(sub.id, "a", ttl=5), subs.member(sub.id, "b", ttl=5)
        assert sorted((await a.heartbeat()).epochs) == [0, 1, 2, 3]
        assert (await b.heartbeat()).epochs == {}  # a holds them all until it rebalances
        la = await a.heartbeat()  # two live members: a keeps its fair share of 2
        assert sorted(la.epochs) == [0, 1]
        lb = await b.heartbeat()
        assert sorted(lb.epochs) == [2, 3] and all(e == 2 for e in lb.epochs.values())
        with pytest.raises(LeaseLostError):  # a's old lease on partition 2 is fenced
            await a.ack(2, 1, 1)
        with pytest.raises(LeaseLostError):
            await b.ack(2, 1, 1)  # b's lease has epoch 2, not 1
        page = await b.poll(limit=100)
        assert {e["partition"] for e in page.events} <= {2, 3} and page.events
        with pytest.raises(BadRequestError):
            await b.ack(2, -1, 2)
        with pytest.raises(BadRequestError):
            subs.member(sub.id, "c", ttl=0)
        await b.leave()
        assert sorted((await a.heartbeat()).epochs) == [0, 1, 2, 3]
