"""The outbox relay when several processes (here: Apps) share one store.

A process that only reads must not re-publish the log its writers publish; rows
whose writer died unpublished are published by whoever is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import reventless as rv
from reventless.relay import decode_batch
from tests.model import Counter, Increment


class Recording(rv.InMemoryBroker):
    """An in-memory broker that remembers the offsets published through it (a consumer of
    every topic: the relay publishes to it as to a durable broker)."""

    def __init__(self) -> None:
        super().__init__()
        self.offsets: list[int] = []

    def has_subscribers(self, topic: str) -> bool:
        return True

    async def publish(self, messages: Sequence[rv.Message]) -> None:
        await super().publish(messages)
        for m in messages:
            self.offsets.extend(decode_batch(m.data).column("_offset").to_pylist())


async def test_a_reading_process_does_not_republish_what_the_writer_published(
    file_url: str,
) -> None:
    writer_broker, reader_broker = Recording(), Recording()
    reader = rv.App(store=file_url, broker=reader_broker)
    reader.event_log(Counter)
    writer = rv.App(store=file_url, broker=writer_broker)
    log = writer.event_log(Counter)
    async with reader:
        async with writer:
            for i in range(40):
                await log.execute(f"c-{i % 4}", Increment())
            await asyncio.sleep(1.5)  # past the reader relay's first look at the store
        await asyncio.sleep(2.0)  # and past the writer's shutdown
    assert sorted(set(writer_broker.offsets)) == list(range(1, 41))
    assert reader_broker.offsets == []


async def test_rows_a_dead_writer_left_unpublished_are_published_by_another_process(
    file_url: str,
) -> None:
    down, up = Recording(), Recording()
    writer = rv.App(store=file_url, broker=down)
    log = writer.event_log(Counter)
    async with writer:
        down.set_available(False)  # its relay cannot publish before it stops
        for i in range(20):
            await log.execute(f"c-{i % 2}", Increment())
    assert down.offsets == []
    survivor = rv.App(store=file_url, broker=up, options=rv.AppOptions(relay_orphan_after=0.2))
    survivor.event_log(Counter)
    async with survivor:
        for _ in range(300):
            if len(set(up.offsets)) >= 20:
                break
            await asyncio.sleep(0.02)
    assert sorted(set(up.offsets)) == list(range(1, 21))
