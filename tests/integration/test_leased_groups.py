"""Leased collector groups: members join, leave, die and are fenced; every event lands once.

The ``ordered`` read model (tests/integration/group_members.py) counts each aggregate's
events and refuses one whose version is not the next (a duplicate or a reordering becomes
a dead letter), so exact counts and no dead letters prove every event was applied exactly
once, in per-aggregate order. Everything is checked by reading the store.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import reventless as rv
from reventless.collect.groups import group_name as lease_group
from reventless.store.tables import collector_leases as L
from reventless.testing import envelope
from tests.integration.group_members import leased_app
from tests.integration.test_groups import rows_and_letters, write_commands
from tests.model import Counter, Incremented

ROOT = Path(__file__).resolve().parents[2]
PARTS = 4


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh SQLite file store, or a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
    else:
        yield request.getfixturevalue("pg_url")


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait for a condition on the store or the members (``TimeoutError`` after ``timeout``)."""

    async def wait() -> None:
        while not await check():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


def owned(app: rv.App) -> set[int]:
    return set(app.collector("ordered").owned["Counter"])


def split(*apps: rv.App) -> list[int]:
    """How many partitions each member runs, if together they run each exactly once."""
    sets = [owned(a) for a in apps]
    every = [p for s in sets for p in s]
    return [len(s) for s in sets] if sorted(every) == list(range(PARTS)) else []


async def leases(app: rv.App) -> dict[int, tuple[str | None, int]]:
    """partition -> (owner, epoch) as the store has them."""
    stmt = sa.select(L.c.partition, L.c.owner, L.c.epoch).where(
        L.c.component == "ordered", L.c.topic == "Counter"
    )
    rows = await app.store.db.read(lambda c: c.execute(stmt).all())
    return {int(p): (o, int(e)) for p, o, e in rows}


async def expires(app: rv.App, worker: str) -> float:
    """When ``worker``'s leases run out (seconds since the epoch, store clock)."""
    stmt = sa.select(sa.func.max(L.c.expires_at)).where(
        L.c.component == "ordered", L.c.owner == worker
    )
    return float(await app.store.db.read(lambda c: c.execute(stmt).scalar_one()))


async def intrude(app: rv.App, partition: int) -> None:
    """Another worker claims ``partition``, as after an expiry: new owner, epoch + 1."""
    take_over = (
        L.update()
        .where(L.c.component == "ordered", L.c.topic == "Counter", L.c.partition == partition)
        .values(owner="intruder", epoch=L.c.epoch + 1, expires_at=time.time() + 3600)
    )
    await app.store.db.write(lambda conn: conn.execute(take_over))


async def events_landed(app: rv.App) -> int:
    rows, _ = await rows_and_letters(app)
    return sum(r[1] for r in rows)


def merge(*counts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


async def until_split(want: list[int], *apps: rv.App) -> None:
    """Wait until the members run each partition exactly once, ``want[i]`` of them each."""

    async def done() -> bool:
        return split(*apps) == want

    await until(done)


async def landed_exactly_once(
    writer: rv.App, members: Sequence[rv.App], counts: dict[str, int], timeout: float = 10.0
) -> None:
    """Every event of ``counts`` lands in the read model once, in order (no dead letter),
    committed by exactly one member, and every member committed some."""
    total = sum(counts.values())

    async def all_landed() -> bool:
        return await events_landed(writer) >= total

    await until(all_landed, timeout)
    rows, letters = await rows_and_letters(writer)
    assert letters == []  # no duplicate, nothing out of order
    assert {r[0]: r[1] for r in rows} == counts  # every event exactly once
    processed = [m.collector("ordered").processed for m in members]
    assert sum(processed) == total  # committed once, by one member
    assert all(n > 0 for n in processed)


async def test_members_split_partitions_and_a_joiner_gets_its_share(store: str) -> None:
    broker = rv.InMemoryBroker()  # shared: live delivery through per-partition groups
    writer = rv.App(store=store, broker=broker, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    kw = {"ttl": 5.0, "heartbeat": 0.1, "poll": 0.05}
    a, b, c = (leased_app(store, broker, w, i, **kw) for i, w in enumerate("abc"))
    async with writer, a, b:
        await until_split([2, 2], a, b)
        first = await write_commands(log, 24, 4)
        async with c:
            writing = asyncio.create_task(write_commands(log, 24, 8))  # while c joins
            await until_split([2, 1, 1], a, b, c)  # 4 // 3 each, the first by name one more
            during = await writing
            after = await write_commands(log, 24, 2)  # every member has partitions now
            await landed_exactly_once(writer, (a, b, c), merge(first, during, after))
            table = await leases(writer)
            for worker, member in zip("abc", (a, b, c), strict=True):
                assert {p for p, (o, _) in table.items() if o == worker} == owned(member)


async def test_a_stopping_member_hands_its_partitions_over_at_once(store: str) -> None:
    writer = rv.App(store=store, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    # a lease that lives a minute: only the handover on stop can move partitions in time
    kw = {"ttl": 60.0, "heartbeat": 0.1, "poll": 0.05}
    a = leased_app(store, "memory://", "a", 0, **kw)
    b = leased_app(store, "memory://", "b", 1, **kw)
    async with writer, a:
        async with b:

            async def two_two() -> bool:
                return split(a, b) == [2, 2]

            await until(two_two)
            first = await write_commands(log, 16, 3)
            held_by_b = owned(b)
            b_collector = b.collector("ordered")
        assert b_collector.owned["Counter"] == []

        async def a_has_all() -> bool:
            return split(a) == [PARTS]

        await until(a_has_all, timeout=5.0)
        counts = merge(first, await write_commands(log, 16, 3))

        async def all_landed() -> bool:
            return await events_landed(writer) >= sum(counts.values())

        await until(all_landed)
        rows, letters = await rows_and_letters(writer)
        assert letters == []
        assert {r[0]: r[1] for r in rows} == counts
        table = await leases(writer)
        assert {o for o, _ in table.values()} == {"a"}
        assert all(table[p][1] == 3 for p in held_by_b)  # claimed by a, by b, by a again


async def test_a_killed_member_is_taken_over_after_its_lease_expires(store: str) -> None:
    ttl = 1.5
    writer = rv.App(store=store, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with writer:  # creates the topic before the members start
        procs = {
            w: await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.integration.group_members",
                store,
                "memory://",  # a broker of its own: members read the store (poll 0.05 s)
                "leased",
                w,
                str(label),
                str(ttl),
                "0.2",
                "0.05",
                stdout=asyncio.subprocess.PIPE,
                env=env,
                cwd=ROOT,
            )
            for label, w in enumerate("ab")
        }
        try:
            for p in procs.values():
                assert p.stdout is not None
                assert (await asyncio.wait_for(p.stdout.readline(), 30)).strip() == b"ready"

            async def two_two() -> bool:
                owners = [o for o, _ in (await leases(writer)).values()]
                return sorted(map(str, owners)) == ["a", "a", "b", "b"]

            await until(two_two)
            before = await leases(writer)
            victim = str(before[0][0])
            survivor = "b" if victim == "a" else "a"
            victim_parts = {p for p, (o, _) in before.items() if o == victim}
            first = await write_commands(log, 24, 4)

            async def victim_working() -> bool:
                rows, _ = await rows_and_letters(writer)
                return any(r[2] == "ab".index(victim) for r in rows)

            await until(victim_working)
            writing = asyncio.create_task(write_commands(log, 24, 12))
            await asyncio.sleep(0)  # the victim dies while the stream is being written
            procs[victim].kill()  # SIGKILL: no leases given back, no clean shutdown
            await procs[victim].wait()
            expiry = await expires(writer, victim)  # its last renewal's, by the store clock
            seen_at: list[float] = []

            async def taken_over() -> bool:
                if {o for o, _ in (await leases(writer)).values()} != {survivor}:
                    return False
                seen_at.append(time.time())
                return True

            await until(taken_over)
            assert seen_at[0] > expiry  # not before its lease ran out (one host: one clock)
            counts = merge(first, await writing)
            total = sum(counts.values())

            async def all_landed() -> bool:
                return await events_landed(writer) >= total

            await until(all_landed)
            rows, letters = await rows_and_letters(writer)
            assert letters == []  # nothing twice, nothing out of order
            assert {r[0]: r[1] for r in rows} == counts  # every event exactly once
            table = await leases(writer)
            assert all(table[p][1] == before[p][1] + 1 for p in victim_parts)  # one claim each
            won = {r[0] for r in rows if r[2] == "ab".index(survivor)}
            assert any(rv.partition_of(agg, PARTS) in victim_parts for agg in won)
        finally:
            for p in procs.values():
                if p.returncode is None:
                    p.kill()
                    await p.wait()


async def test_a_member_whose_lease_was_taken_over_cannot_commit(store: str) -> None:
    broker = rv.InMemoryBroker()
    writer = rv.App(store=store, broker=broker, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    # a heartbeat every 20 s: the member does not notice the takeover before it commits
    a = leased_app(store, broker, "a", 0, ttl=60.0, heartbeat=20.0, poll=0.05)
    async with writer, a:
        coll = a.collector("ordered")
        first = await write_commands(log, 24, 2)

        async def caught_up() -> bool:
            return await events_landed(writer) >= sum(first.values())

        await until(caught_up)
        part = 1
        taken = sorted(agg for agg in first if rv.partition_of(agg, PARTS) == part)
        assert taken
        db = writer.store.db
        cp_sql = (
            "SELECT \"offset\" FROM rv_checkpoints WHERE component = 'ordered' "
            f"AND topic = 'Counter' AND \"partition\" = {part}"
        )
        checkpoint = await db.read(lambda conn: conn.exec_driver_sql(cp_sql).scalar())
        rows_before, _ = await rows_and_letters(writer)

        # Another worker claims partition 1, as after an expiry: new owner, epoch + 1.
        await intrude(writer, part)
        assert part in owned(a)  # the member has not noticed

        # A batch of the partition (the next event of each aggregate) cannot land: the
        # upserts, a dead letter and the checkpoint roll back together.
        batch = [
            envelope(agg, Incremented(), version=first[agg] + 1, topic="Counter") for agg in taken
        ]
        batch.append(envelope(taken[0], Incremented(), version=99, topic="Counter"))  # refused
        with pytest.raises(rv.LeaseLostError):
            await coll.process("Counter", part, batch, batch[-1].offset)
        rows, letters = await rows_and_letters(writer)
        assert rows == rows_before and letters == []
        with pytest.raises(rv.LeaseLostError):  # nor can a redrive of one of its events
            await coll.redo(batch[0])
        assert (await rows_and_letters(writer))[0] == rows_before
        assert await db.read(lambda conn: conn.exec_driver_sql(cp_sql).scalar()) == checkpoint

        async def dropped() -> bool:  # the refused commit made the member let it go
            return part not in owned(a)

        await until(dropped, timeout=5.0)
        assert owned(a) == {0, 2, 3}

        # Live events: the member's partitions go on, the lost one stays untouched.
        second = await write_commands(log, 24, 2)
        mine = {k: v for k, v in merge(first, second).items() if k not in taken}

        async def others_landed() -> bool:
            rows, _ = await rows_and_letters(writer)
            return {r[0]: r[1] for r in rows if r[0] not in taken} == mine

        await until(others_landed)
        rows, letters = await rows_and_letters(writer)
        assert [r for r in rows if r[0] in taken] == [r for r in rows_before if r[0] in taken]
        assert letters == []
        assert await db.read(lambda conn: conn.exec_driver_sql(cp_sql).scalar()) == checkpoint
        assert (await leases(writer))[part][0] == "intruder"

        # The same on the live path: partition 2 is taken over, then its events arrive.
        other = 2
        rows_before, _ = await rows_and_letters(writer)
        await intrude(writer, other)
        third = await write_commands(log, 24, 2)

        async def dropped_too() -> bool:
            return other not in owned(a)

        await until(dropped_too, timeout=5.0)
        everything = merge(first, second, third)
        kept = {k: v for k, v in everything.items() if rv.partition_of(k, PARTS) in (0, 3)}

        async def kept_landed() -> bool:
            rows, _ = await rows_and_letters(writer)
            return {r[0]: r[1] for r in rows if r[0] in kept} == kept

        await until(kept_landed)
        rows, letters = await rows_and_letters(writer)
        lost = {agg for agg in third if rv.partition_of(agg, PARTS) in (part, other)}
        assert [r for r in rows if r[0] in lost] == [r for r in rows_before if r[0] in lost]
        assert letters == []


@pytest.fixture(
    params=[
        pytest.param("nats", marks=pytest.mark.nats),
        pytest.param("sns+sqs", marks=pytest.mark.aws),
    ]
)
def broker_url(request: pytest.FixtureRequest) -> str:
    """A private JetStream server, or SNS/SQS on the session's moto server (own prefix)."""
    return str(request.getfixturevalue("nats_url" if request.param == "nats" else "sns_sqs_url"))


async def test_leased_members_share_a_broker_topic_through_partition_groups(
    tmp_path: Path, broker_url: str
) -> None:
    store = f"sqlite:///{tmp_path / 'group.db'}"
    writer = rv.App(store=store, broker=broker_url, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    # the store is polled once a minute: live delivery comes through the broker
    kw = {"ttl": 5.0, "heartbeat": 0.1, "poll": 60.0}
    a, b, c = (leased_app(store, broker_url, w, i, **kw) for i, w in enumerate("abc"))
    async with writer, a, b:
        await until_split([2, 2], a, b)
        first = await write_commands(log, 24, 3)
        async with c:
            await until_split([2, 1, 1], a, b, c)
            # c reads the partition it took through the consumer or queue a or b used
            after = await write_commands(log, 24, 3)
            await landed_exactly_once(writer, (a, b, c), merge(first, after), timeout=30.0)
    groups = [lease_group("ordered", "Counter", p) for p in range(PARTS)]
    if broker_url.startswith("nats"):
        # one durable consumer per partition, shared by its owners in turn, all acked
        from reventless_nats import NatsOptions

        infos = await consumers(broker_url, "Counter")
        opts = NatsOptions.from_url(broker_url)
        assert {i.name for i in infos} == {
            opts.durable_name(g, p % opts.partitions) for p, g in enumerate(groups)
        }
        assert all(i.delivered.stream_seq and not i.num_ack_pending for i in infos)
    else:
        # one queue (and dead-letter queue) per partition, every message deleted
        depths = await queue_depths(broker_url, groups)
        assert len(depths) == 2 * PARTS
        assert all(n == 0 for n in depths.values()), depths


async def consumers(url: str, topic: str) -> list[Any]:
    """The durable consumers of ``topic``'s stream, as the server lists them."""
    import nats
    from reventless_nats import NatsOptions

    opts = NatsOptions.from_url(url)
    nc = await nats.connect(list(opts.servers))
    try:
        return list(await nc.jetstream().consumers_info(opts.stream_name(topic)))
    finally:
        await nc.close()


async def queue_depths(url: str, groups: list[str]) -> dict[str, int]:
    """Messages left (visible or in flight) in each group's queue and dead-letter queue."""
    from aiobotocore.session import get_session
    from reventless_aws.options import SnsSqsOptions

    opts = SnsSqsOptions.from_url(url)
    attrs = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    out: dict[str, int] = {}
    async with get_session().create_client(
        "sqs",
        region_name=opts.region,
        endpoint_url=opts.endpoint,
        aws_access_key_id=opts.access_key,
        aws_secret_access_key=opts.secret_key,
    ) as sqs:
        for name in [n for g in groups for n in (opts.queue_name(g), opts.dlq_name(g))]:
            queue = (await sqs.get_queue_url(QueueName=name))["QueueUrl"]
            got = (await sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=attrs))[
                "Attributes"
            ]
            out[name] = sum(int(got[a]) for a in attrs)
    return out
