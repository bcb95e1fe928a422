"""The broker conformance suite: subclass it and provide a ``broker`` fixture.

Example::

    class TestInMemory(BrokerConformance):
        @pytest.fixture
        async def broker(self):
            b = InMemoryBroker()
            yield b
            await b.close()

Adapters move bytes and headers; every adapter must show the behaviour below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from reventless.broker import Broker, Handler, Message


def msg(topic: str, n: int, key: str = "k") -> Message:
    return Message(topic=topic, data=f"{topic}:{n}".encode(), msg_id=f"{topic}-{n}", key=key)


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``cond()`` is true (fails the test on timeout)."""

    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.01)

    async with asyncio.timeout(timeout):
        await wait()


class BrokerConformance:
    """Behaviour every Broker adapter must show. Subclasses provide a ``broker`` fixture."""

    async def test_fan_out_to_every_group_in_order(self, broker: Broker) -> None:
        await broker.declare("t1")
        got: dict[str, list[bytes]] = {"a": [], "b": []}

        def sink(name: str) -> Handler:
            async def handle(msgs: Sequence[Message]) -> None:
                got[name].extend(m.data for m in msgs)

            return handle

        await broker.subscribe("a", ["t1"], sink("a"))
        await broker.subscribe("b", ["t1"], sink("b"))
        await broker.publish([msg("t1", i) for i in range(50)])
        await until(lambda: len(got["a"]) == 50 and len(got["b"]) == 50)
        assert got["a"] == got["b"] == [f"t1:{i}".encode() for i in range(50)]

    async def test_duplicate_publishes_are_dropped(self, broker: Broker) -> None:
        await broker.declare("t2")
        got: list[bytes] = []

        async def handle(msgs: Sequence[Message]) -> None:
            got.extend(m.data for m in msgs)

        await broker.subscribe("g", ["t2"], handle)
        await broker.publish([msg("t2", 1), msg("t2", 1), msg("t2", 2)])
        await broker.publish([msg("t2", 2)])
        await until(lambda: len(got) >= 2)
        await asyncio.sleep(0.2)
        assert got == [b"t2:1", b"t2:2"]

    async def test_failed_handler_gets_the_message_again(self, broker: Broker) -> None:
        await broker.declare("t3")
        attempts: list[bytes] = []

        async def handle(msgs: Sequence[Message]) -> None:
            attempts.extend(m.data for m in msgs)
            if len(attempts) < 3:
                raise RuntimeError("not yet")

        await broker.subscribe("g", ["t3"], handle)
        await broker.publish([msg("t3", 1)])
        await until(lambda: len(attempts) >= 3)
        assert set(attempts) == {b"t3:1"}

    async def test_per_key_order_within_a_consumer_group(self, broker: Broker) -> None:
        await broker.declare("t4")
        seen: dict[str, list[int]] = {}

        def member(name: str) -> Handler:
            async def handle(msgs: Sequence[Message]) -> None:
                for m in msgs:
                    key, n = m.data.decode().split(":")
                    seen.setdefault(key, []).append(int(n))
                    seen.setdefault(f"member-{name}", []).append(0)

            return handle

        await broker.subscribe("group", ["t4"], member("1"))
        await broker.subscribe("group", ["t4"], member("2"))
        batch = [
            Message(topic="t4", data=f"k{i % 4}:{i}".encode(), msg_id=f"t4-{i}", key=f"k{i % 4}")
            for i in range(80)
        ]
        await broker.publish(batch)
        await until(lambda: sum(len(seen.get(f"k{j}", [])) for j in range(4)) == 80)
        for j in range(4):
            assert seen[f"k{j}"] == sorted(seen[f"k{j}"])  # per-key order kept
        assert sum(len(v) for k, v in seen.items() if k.startswith("member")) == 80  # once each

    async def test_unsubscribed_topics_are_not_delivered(self, broker: Broker) -> None:
        await broker.declare("t5")
        await broker.declare("t6")
        got: list[str] = []

        async def handle(msgs: Sequence[Message]) -> None:
            got.extend(m.topic for m in msgs)

        sub = await broker.subscribe("g", ["t5"], handle)
        await broker.publish([msg("t6", 1), msg("t5", 1)])
        await until(lambda: got == ["t5"])
        await sub.close()
        await broker.publish([msg("t5", 2)])
        await asyncio.sleep(0.1)
        assert got == ["t5"]
