"""What a test does when a service it needs is missing."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
from typing import NoReturn

import pytest


def unavailable(what: str) -> NoReturn:
    """Under CI (``CI`` set) fail the test; a developer's run skips it with the reason."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI=true: service-backed tests must not skip)")
    pytest.skip(what)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for a private server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_package(module: str, hint: str) -> None:
    """Skip (fail under CI) when ``module`` (an adapter package) is not installed."""
    try:
        importlib.import_module(module)
    except ImportError:
        unavailable(f"{module} is not installed ({hint})")


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    """Terminate a private server (SIGTERM, then SIGKILL after 10 s)."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
