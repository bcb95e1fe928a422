"""The fault proxy itself, against a small echo server: each fault does what it says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from tests.faults.proxy import FaultProxy


class Echo:
    """A server that greets each connection with ``hi\\n``, then echoes; it records what
    it received and how each connection ended."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.ended: list[str] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hi\n")
        try:
            while data := await reader.read(1024):
                self.received += data
                writer.write(data)
                await writer.drain()
            self.ended.append("eof")
        except ConnectionResetError:
            self.ended.append("reset")
        finally:
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    e = Echo()
    e.server = await asyncio.start_server(e.handle, "127.0.0.1", 0)
    yield e
    e.server.close()


@pytest.fixture
def proxy(echo: Echo) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", echo.port)) as p:
        yield p


async def connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def silent(reader: asyncio.StreamReader, within: float = 0.3) -> bool:
    """True if nothing (not even EOF) arrives within ``within`` seconds."""
    try:
        await asyncio.wait_for(reader.read(1), within)
    except TimeoutError:
        return True
    return False


async def test_forwards_both_ways(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    assert await reader.readline() == b"hi\n"
    writer.write(b"ping\n")
    assert await reader.readline() == b"ping\n"
    assert proxy.accepted == proxy.active == 1
    assert proxy.forwarded == {"up": 5, "down": 8}
    writer.close()
    await until(lambda: proxy.active == 0 and echo.ended == ["eof"])


async def test_delay_holds_each_chunk(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    proxy.delay(0.2)
    started = time.monotonic()
    writer.write(b"ping\n")
    assert await reader.readline() == b"ping\n"
    assert time.monotonic() - started >= 0.4  # there and back
    proxy.heal()
    started = time.monotonic()
    writer.write(b"pong\n")
    assert await reader.readline() == b"pong\n"
    assert time.monotonic() - started < 0.2
    writer.close()


async def test_blackhole_holds_bytes_until_heal(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    proxy.blackhole()
    writer.write(b"lost?\n")
    late_reader, late_writer = await connect(proxy)  # accepted, but hears nothing
    assert await silent(reader) and await silent(late_reader)
    assert echo.received == b""
    proxy.heal()
    assert await reader.readline() == b"lost?\n"  # held, not dropped
    assert await late_reader.readline() == b"hi\n"
    writer.close()
    late_writer.close()


async def test_one_way_blackholes(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    proxy.blackhole("down")  # the server hears the client; the client hears nothing
    writer.write(b"a\n")
    await until(lambda: echo.received == b"a\n")
    assert await silent(reader)
    proxy.heal()
    assert await reader.readline() == b"a\n"
    proxy.blackhole("up")  # the client's bytes go nowhere
    writer.write(b"b\n")
    assert await silent(reader)
    assert echo.received == b"a\n"
    proxy.heal()
    assert await reader.readline() == b"b\n"
    writer.close()


async def test_reset_aborts_both_sides(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    assert proxy.reset() == 1
    with pytest.raises(ConnectionResetError):
        await reader.read(1)
    await until(lambda: echo.ended == ["reset"])
    reader, writer = await connect(proxy)  # new connections work at once
    assert await reader.readline() == b"hi\n"
    writer.close()


async def test_refuse_closes_the_door_not_the_open_connections(proxy: FaultProxy) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    writer.write(b"still\n")
    assert await reader.readline() == b"still\n"
    proxy.heal()
    reader2, writer2 = await connect(proxy)
    assert await reader2.readline() == b"hi\n"
    writer.close()
    writer2.close()


async def test_half_open_closes_the_server_side_only(proxy: FaultProxy, echo: Echo) -> None:
    reader, writer = await connect(proxy)
    await reader.readline()
    assert proxy.half_open() == 1
    await until(lambda: echo.ended == ["eof"])  # the server saw the connection end
    writer.write(b"anyone?\n")  # discarded: no reply, no EOF, no reset
    assert await silent(reader)
    assert echo.received == b""
    proxy.heal()  # does not bring a forgotten connection back
    assert await silent(reader)
    writer.close()
    await until(lambda: proxy.active == 0)


def test_route_points_a_url_at_the_proxy() -> None:
    proxy = FaultProxy(("127.0.0.1", 5432), port=6000)
    assert proxy.route("postgresql+psycopg://u:p@db:5432/x?a=1") == (
        "postgresql+psycopg://u:p@127.0.0.1:6000/x?a=1"
    )
    assert proxy.route("nats://127.0.0.1:4222?prefix=t") == "nats://127.0.0.1:6000?prefix=t"
