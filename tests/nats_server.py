"""Private nats-server processes for the ``nats`` tests.

``nats_server`` (session scope) is one JetStream server on a free port with its own
store dir; tests keep apart by using a unique ``prefix=`` (so unique streams). Fault
tests start their own ``NatsServer`` and kill/restart it.

If the binary is missing the tests skip, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.services import free_port, require_package, stop_process, unavailable

_CANDIDATES = ("/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server")


def nats_binary() -> str:
    """Path of nats-server ($NATS_SERVER_BIN, PATH, Debian's /usr/sbin), else skip/fail."""
    explicit = os.environ.get("NATS_SERVER_BIN")
    candidates = [explicit] if explicit else [shutil.which("nats-server"), *_CANDIDATES]
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if not found:
        unavailable(f"nats-server is not installed (run infra/local/nats.sh): {explicit or ''}")
    require_adapter()
    assert found is not None
    return found


def require_adapter() -> None:
    """Skip (fail under CI) when the adapter package is not installed."""
    require_package("reventless_nats", "pip install -e adapters/nats")


class PortTakenError(RuntimeError):
    """nats-server could not bind a port that ``free_port`` had seen free: another process
    (or an outgoing connection's ephemeral port) took it in between. Pick new ports."""


class NatsServer:
    """One nats-server with JetStream on 127.0.0.1; ``kill``/``start`` keep port and data."""

    def __init__(
        self,
        binary: str,
        store_dir: Path,
        port: int | None = None,
        extra: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        self.store_dir = store_dir
        self.port = port or free_port()
        self.extra = list(extra)  # e.g. ["--user", "u", "--pass", "p"] or TLS flags
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "-js",
                    "-a",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-sd",
                    str(self.store_dir),
                    *self.extra,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:]
                if "address already in use" in tail:
                    raise PortTakenError(f"nats-server could not bind its ports: {tail}")
                raise RuntimeError(f"nats-server exited: {tail}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not listen on {self.port}")

    def kill(self) -> None:
        """SIGKILL: no clean shutdown (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A private nats-server (JetStream, file storage) for the whole test session."""
    for attempt in range(3):  # a port taken between free_port and the bind: another one
        server = NatsServer(nats_binary(), tmp_path_factory.mktemp("nats"))
        try:
            server.start()
            break
        except PortTakenError:
            if attempt == 2:
                raise
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """A broker URL on the session server with a prefix of its own (fresh streams)."""
    return f"{nats_server.url}?prefix=t{uuid.uuid4().hex[:10]}&backoff=0.05"
