"""A private moto server (SNS, SQS, CloudFormation) for the ``aws`` tests.

``moto_server`` (session scope) starts ``moto_server`` on 127.0.0.1 on a free port and
stops it at the end; tests keep apart by using a unique ``prefix=`` (own topics and
queues). If moto or the adapter is missing the tests skip, except under ``CI=true``
where they fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import free_port, require_package, stop_process, unavailable

#: Fake credentials for moto (it accepts any).
CREDENTIALS = "testing:testing"


def require_adapter() -> None:
    """Skip (fail under CI) when the adapter package is not installed."""
    require_package("reventless_aws", "pip install -e adapters/aws")


def moto_binary() -> str:
    """The ``moto_server`` script next to this interpreter (or on PATH)."""
    here = Path(sys.executable).parent / "moto_server"
    found = str(here) if here.exists() else shutil.which("moto_server")
    if not found:
        unavailable("moto_server is not installed (pip install 'moto[server]')")
    require_adapter()
    assert found is not None
    return found


class MotoServer:
    """One moto server on 127.0.0.1."""

    def __init__(self, binary: str, log_path: Path, port: int | None = None) -> None:
        self.binary, self.log_path = binary, log_path
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        env = dict(os.environ, MOTO_ALLOW_NONEXISTENT_REGION="false")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on port {self.port}")

    def stop(self) -> None:
        stop_process(self.proc)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A private moto server for the whole test session."""
    server = MotoServer(moto_binary(), tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        server.start()
    except RuntimeError as exc:
        unavailable(f"moto_server could not start: {exc}")
    yield server
    server.stop()


def aws_url(server: MotoServer, prefix: str | None = None, **options: object) -> str:
    """A broker URL on ``server`` with a fresh prefix and short test timings."""
    opts = {"endpoint": server.endpoint, "prefix": prefix or f"t{uuid.uuid4().hex[:10]}"}
    opts |= {"wait": 1, "backoff": 0, "visibility": 5}
    opts |= options
    query = "&".join(f"{k}={v}" for k, v in opts.items())
    return f"sns+sqs://{CREDENTIALS}@us-east-1?{query}"


@pytest.fixture
def sns_sqs_url(moto_server: MotoServer) -> str:
    """A broker URL on the session's moto server with a prefix of its own."""
    return aws_url(moto_server)
