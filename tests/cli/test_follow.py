"""``reventless tail --follow``: events committed by another process appear on its stdout
while it runs; SIGINT or SIGTERM ends it quietly with status 0."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import EVENTS, fill
from tests.cli.process import command, env

DEADLINE = 30.0


class Follower:
    """``reventless tail Counter --follow`` in a subprocess; a thread collects its lines."""

    def __init__(self, url: str, cwd: Path, *args: str) -> None:
        argv = command("tail", "Counter", "--store", url, "--follow", *args)
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def offsets(self) -> list[int]:
        return [json.loads(line)["offset"] for line in list(self.lines)]

    async def wait_for(self, offsets: list[int]) -> None:
        """Until the follower printed exactly ``offsets`` (or fail at the deadline)."""
        deadline = time.monotonic() + DEADLINE
        while self.offsets() != offsets:
            assert self.proc.poll() is None, self.proc.stderr.read() if self.proc.stderr else ""
            assert len(self.offsets()) <= len(offsets), self.offsets()
            assert time.monotonic() < deadline, f"printed {self.offsets()}, want {offsets}"
            await asyncio.sleep(0.02)

    async def wait_for_any(self, seconds: float) -> None:
        """Until the follower printed something, for at most ``seconds``."""
        deadline = time.monotonic() + seconds
        while not self.lines and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def stop(self, sig: signal.Signals) -> tuple[int, str]:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


@pytest.fixture
def followers() -> Iterator[list[Follower]]:
    made: list[Follower] = []
    yield made
    for f in made:
        if f.proc.poll() is None:
            f.proc.kill()
            f.proc.wait()


async def follow_and_stop(
    url: str, tmp_path: Path, followers: list[Follower], sig: signal.Signals
) -> None:
    await fill(url, 1, EVENTS)
    follower = Follower(url, tmp_path, "--from", "11")
    followers.append(follower)
    await follower.wait_for([11, 12])  # caught up: it is following now
    await fill(url, 13, 3)
    await follower.wait_for([11, 12, 13, 14, 15])
    await fill(url, 16, 1)  # a later commit wakes it again
    await follower.wait_for([11, 12, 13, 14, 15, 16])
    code, err = follower.stop(sig)
    assert (code, err) == (0, "")
    assert [json.loads(x)["data"]["by"] for x in follower.lines] == [11, 12, 13, 14, 15, 16]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_follow_prints_new_commits_until_interrupted(
    tmp_path: Path, followers: list[Follower], sig: signal.Signals
) -> None:
    await follow_and_stop(f"sqlite:///{tmp_path / 'f.db'}", tmp_path, followers, sig)


@pytest.mark.postgres
async def test_follow_wakes_on_postgres_notify(
    pg_url: str, tmp_path: Path, followers: list[Follower]
) -> None:
    await follow_and_stop(pg_url, tmp_path, followers, signal.SIGINT)


async def test_follow_without_from_starts_after_the_head(
    tmp_path: Path, followers: list[Follower]
) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    await fill(url, 1, EVENTS)
    follower = Follower(url, tmp_path)
    followers.append(follower)
    # It prints nothing until a commit; keep committing until its first line shows which
    # offset it started from (it cannot have seen the head's events).
    deadline = time.monotonic() + DEADLINE
    offset = EVENTS
    while not follower.lines:
        assert time.monotonic() < deadline and follower.proc.poll() is None
        await fill(url, offset + 1, 1)
        offset += 1
        await follower.wait_for_any(0.2)
    first = follower.offsets()[0]
    assert EVENTS < first <= offset
    await follower.wait_for(list(range(first, offset + 1)))
    assert follower.stop(signal.SIGINT) == (0, "")
