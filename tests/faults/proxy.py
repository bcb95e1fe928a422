"""``FaultProxy``: a TCP proxy that injects network faults between a client and a server.

It runs on a thread of its own with its own event loop, so clients on any thread (the
store's worker threads, the test's event loop) go through it alike, and a fault takes
effect the moment its call returns. Faults, each undone by ``heal()``:

- ``delay(s)``: every chunk is forwarded ``s`` seconds after it arrived (a slow link;
  chunks are pipelined, not serialised, and keep their order);
- ``blackhole(direction=None)``: nothing more is forwarded that way, sockets stay open and
  new connections are accepted into the same silence. Bytes are held, not discarded: a
  TCP stack retransmits across a partition, so on ``heal`` they arrive, unless the
  connection was given up meanwhile. ``blackhole("up")`` alone is a one-way partition;
- ``reset()``: every current connection is aborted with an RST on both sides;
- ``refuse()``: the listening socket is closed, so connects are refused (ECONNREFUSED);
  open connections carry on;
- ``half_open()``: the server side of every current connection is closed while the
  client's socket stays open and hears nothing (a server or middlebox that forgot the
  connection; only the client's own timeouts or keepalives can notice).

Example::

    with FaultProxy(("127.0.0.1", 5432)) as proxy:
        url = proxy.route("postgresql+psycopg://postgres@127.0.0.1:5432/db")
        proxy.blackhole()
        ...
        proxy.heal()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")
#: ``up``: client to server; ``down``: server to client.
Direction = Literal["up", "down"]
_CHUNK = 65536
_EOF = b""


@dataclass(eq=False)
class _Link:
    """One proxied connection: the client's stream pair and the server's."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    #: The server side is gone (``half_open``): the client hears nothing from now on.
    orphaned: bool = False


def _abort(writer: asyncio.StreamWriter, *, rst: bool) -> None:
    sock = writer.get_extra_info("socket")
    if rst and sock is not None:
        with contextlib.suppress(OSError):  # SO_LINGER 0: close() sends an RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """A TCP proxy on ``127.0.0.1:<port>`` to ``target`` with faults switched at run time."""

    def __init__(self, target: tuple[str, int], *, port: int = 0) -> None:
        self.target = target
        self.port = port
        #: Connections accepted so far, and bytes forwarded each way.
        self.accepted = 0
        self.forwarded: dict[Direction, int] = {"up": 0, "down": 0}
        self._latency = 0.0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._flowing: dict[Direction, asyncio.Event] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen (on a free port unless one was given) and forward until ``stop``."""
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._run(self._start())
        return self

    def stop(self) -> None:
        """Close the listener and every connection; stop the proxy's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._run(self._stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def route(self, url: str) -> str:
        """``url`` (``postgresql://u@host:5432/db``, ``nats://host:4222``, ``http://...``)
        with its host and port replaced by the proxy's; user info, path and query kept."""
        parts = urlsplit(url)
        userinfo, at, _ = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{userinfo}{at}127.0.0.1:{self.port}"))

    @property
    def active(self) -> int:
        """Connections open through the proxy right now."""
        return len(self._links)

    # -- faults ----------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Forward each chunk ``seconds`` after it arrived, both ways (0: no delay)."""
        self._latency = seconds

    def blackhole(self, direction: Direction | None = None) -> None:
        """Stop forwarding ``direction`` (both when None); sockets stay open, bytes are held
        until ``heal``."""
        for d in (direction,) if direction else ("up", "down"):
            self._call(self._flowing[d].clear)

    def reset(self) -> int:
        """Abort every current connection with an RST to both sides; returns how many."""
        return self._run(self._drop_all(rst=True))

    def refuse(self) -> None:
        """Close the listening socket: new connections are refused until ``heal``."""
        self._run(self._close_listener())

    def half_open(self) -> int:
        """Close the server side of every current connection; each client's socket stays
        open and silent (what it sends is discarded). Returns how many."""
        return self._run(self._orphan_all())

    def heal(self) -> None:
        """Undo every fault: no delay, both directions flow (held bytes go out), connects
        are accepted. Connections reset or half-opened stay gone."""
        self._latency = 0.0
        self._run(self._heal())

    # -- the proxy's loop ------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "the proxy is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _call(self, fn: Callable[[], object]) -> None:
        async def call() -> None:
            fn()

        self._run(call())

    async def _start(self) -> None:
        self._flowing = {"up": asyncio.Event(), "down": asyncio.Event()}
        for gate in self._flowing.values():
            gate.set()
        await self._open_listener()

    async def _open_listener(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()  # not wait_closed: 3.12 waits for the connections too
            self._server = None

    async def _heal(self) -> None:
        for gate in self._flowing.values():
            gate.set()
        if self._server is None:
            await self._open_listener()

    async def _stop(self) -> None:
        await self._close_listener()
        await self._drop_all(rst=False)

    async def _drop_all(self, *, rst: bool) -> int:
        links = list(self._links)
        for link in links:
            self._end(link, rst=rst)
        return len(links)

    async def _orphan_all(self) -> int:
        links = [link for link in self._links if not link.orphaned]
        for link in links:
            link.orphaned = True
            link.server.close()
        return len(links)

    def _end(self, link: _Link, *, rst: bool) -> None:
        if link not in self._links:
            return
        self._links.discard(link)
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()
        _abort(link.client, rst=rst)
        _abort(link.server, rst=rst)

    async def _accept(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(cwriter, rst=True)  # the target is down: so is the path through us
            return
        link = _Link(client=cwriter, server=swriter)
        self._links.add(link)
        pipes: tuple[tuple[Direction, asyncio.StreamReader, asyncio.StreamWriter], ...] = (
            ("up", creader, swriter),
            ("down", sreader, cwriter),
        )
        for direction, reader, writer in pipes:
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
            link.tasks += [
                asyncio.create_task(self._read(reader, queue)),
                asyncio.create_task(self._forward(link, direction, queue, writer)),
            ]

    async def _read(
        self, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await reader.read(_CHUNK)
            except OSError:
                data = _EOF
            queue.put_nowait((loop.time(), data))
            if not data:
                return

    async def _forward(
        self,
        link: _Link,
        direction: Direction,
        queue: asyncio.Queue[tuple[float, bytes]],
        writer: asyncio.StreamWriter,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            arrived, data = await queue.get()
            wait = arrived + self._latency - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._flowing[direction].wait()
            if link.orphaned:  # the server side is gone: the client hears nothing
                if direction == "up" and not data:
                    self._end(link, rst=False)  # the client gave the connection up
                if direction == "down" or not data:
                    return
                continue
            if not data:  # one side closed: close the other once its bytes are out
                self._end(link, rst=False)
                return
            self.forwarded[direction] += len(data)
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                self._end(link, rst=False)
                return
