"""Collector groups: members share a topic by partition; per-aggregate order is kept."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

import reventless as rv
from tests.integration.group_members import member_app
from tests.model import Counter, Increment, ResetCounter

ROOT = Path(__file__).resolve().parents[2]


async def write_commands(log: rv.EventLog[Counter], aggregates: int, rounds: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in range(rounds):
        cmds = [
            (f"agg-{i}", ResetCounter() if r % 7 == 6 else Increment()) for i in range(aggregates)
        ]
        out = await log.execute_many(cmds)
        assert not [o for o in out if isinstance(o, rv.Rejected)]
        for (agg, cmd), _ in zip(cmds, out, strict=True):
            counts[agg] = counts.get(agg, 0) + (2 if isinstance(cmd, ResetCounter) else 1)
    return counts


async def rows_and_letters(app: rv.App) -> tuple[list[tuple[str, int, int]], list[rv.DeadLetter]]:
    rows = await app.store.db.read(
        lambda c: list(c.exec_driver_sql("SELECT id, events, member FROM rm_ordered").all())
    )
    return sorted(rows), await app.dead_letters()


async def test_two_members_share_partitions_in_order(file_url: str) -> None:
    writer = rv.App(store=file_url, options=rv.AppOptions(partitions=4))
    log = writer.event_log(Counter)
    m0 = member_app(file_url, "memory://", 0, 2, poll=0.05)
    m1 = member_app(file_url, "memory://", 1, 2, poll=0.05)
    async with writer, m0, m1:
        counts = await write_commands(log, 24, 10)
        await m0.settle()
        await m1.settle()
        rows, letters = await rows_and_letters(writer)
        assert letters == []  # nothing arrived out of order
        assert {r[0]: r[1] for r in rows} == counts  # every event once
        for agg, _, member in rows:
            assert member == (rv.partition_of(agg, 4) % 2)  # the owner handled it
        owned = {
            m: sorted(p for _, p in app.collector("ordered").checkpoints)
            for m, app in ((0, m0), (1, m1))
        }
        assert owned == {0: [0, 2], 1: [1, 3]}


@pytest.mark.nats
@pytest.mark.slow
async def test_member_processes_share_a_nats_topic_in_order(tmp_path: Path, nats_url: str) -> None:
    store = f"sqlite:///{tmp_path / 'group.db'}"
    writer = rv.App(store=store, broker=nats_url, options=rv.AppOptions(partitions=4))
    log = writer.event_log(Counter)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    async with writer:  # creates the topic and streams before the members start
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.integration.group_members",
                store,
                nats_url,
                str(m),
                "2",
                stdout=asyncio.subprocess.PIPE,
                env=env,
                cwd=ROOT,
            )
            for m in range(2)
        ]
        try:
            for p in procs:
                assert p.stdout is not None
                assert (await asyncio.wait_for(p.stdout.readline(), 30)).strip() == b"ready"
            counts = await write_commands(log, 24, 10)
            total = sum(counts.values())

            async def complete() -> list[tuple[str, int, int]]:
                while True:
                    rows, _ = await rows_and_letters(writer)
                    if sum(r[1] for r in rows) >= total:
                        return rows
                    await asyncio.sleep(0.1)

            # members poll the store only every 60 s: delivery came through JetStream
            rows = await asyncio.wait_for(complete(), 30)
            _, letters = await rows_and_letters(writer)
            assert letters == []
            assert {r[0]: r[1] for r in rows} == counts
            assert {r[2] for r in rows} == {0, 1}  # both members did work
            for agg, _, member in rows:
                assert member == rv.partition_of(agg, 4) % 2
        finally:
            for p in procs:
                p.kill()
                await p.wait()
