"""The command in a real terminal (a tmux pane): ``reventless status --watch`` shows the
heads, redraws when another process commits, and Ctrl-C ends it with status 0 and no
traceback; ``export`` draws a progress bar with its count, rate and time left."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import EVENTS, fill
from tests.cli.process import command, env
from tests.services import unavailable

DEADLINE = 30.0


class Pane:
    """A detached tmux session on a private socket, running one shell command."""

    def __init__(self, socket: Path, argv: list[str], cwd: Path) -> None:
        self.socket = socket
        tmux = shutil.which("tmux")
        if tmux is None:
            unavailable("tmux is not installed (infra/local/tmux.sh installs it)")
        self.tmux = tmux
        self.rc = cwd / "rc"
        line = f"{shlex.join(argv)}; echo $? > {shlex.quote(str(self.rc))}; sleep 60"
        self.run("new-session", "-d", "-s", "watch", "-x", "150", "-y", "40", "-c", str(cwd), line)

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [self.tmux, "-S", str(self.socket), *args],
            env={**env(), "TERM": "xterm-256color"},
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "watch")

    def wait_for(self, what: str, ok: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + DEADLINE
        while True:
            text = self.screen()
            if ok(text):
                return text
            assert time.monotonic() < deadline, f"pane never showed {what}:\n{text}"
            time.sleep(0.05)

    def exit_status(self) -> int:
        deadline = time.monotonic() + DEADLINE
        while not (self.rc.exists() and self.rc.read_text().strip()):
            assert time.monotonic() < deadline, f"still running:\n{self.screen()}"
            time.sleep(0.05)
        return int(self.rc.read_text())

    def close(self) -> None:
        subprocess.run(
            [self.tmux, "-S", str(self.socket), "kill-server"], capture_output=True, timeout=10
        )


@pytest.fixture
def panes() -> Iterator[list[Pane]]:
    made: list[Pane] = []
    yield made
    for p in made:
        p.close()


def head_of(screen: str, topic: str) -> int | None:
    """The head the view shows for ``topic`` (its heads row: topic, kind, partitions, head)."""
    m = re.search(rf"│ {topic}\s+│ aggregate\s+│\s+\d+ │\s+(\d+) │", screen)
    return int(m.group(1)) if m else None


async def test_watch_redraws_heads_and_stops_on_ctrl_c(
    counter_store: str, tmp_path: Path, panes: list[Pane]
) -> None:
    argv = command("status", "--watch", "--interval", "0.2", "--store", counter_store)
    pane = Pane(tmp_path / "tmux.sock", argv, tmp_path)
    panes.append(pane)
    first = pane.wait_for("the heads", lambda s: head_of(s, "Counter") == EVENTS)
    assert "counter_totals" in first and "dead letters: 0" in first
    assert "Ctrl-C to stop" in " ".join(first.split())  # (a long store path wraps it)
    await fill(counter_store, EVENTS + 1, 3)  # another process commits: the view follows
    pane.wait_for("the new head", lambda s: head_of(s, "Counter") == EVENTS + 3)
    pane.run("send-keys", "-t", "watch", "C-c")
    assert pane.exit_status() == 0
    last = pane.screen()
    assert "Traceback" not in last and "KeyboardInterrupt" not in last
    assert head_of(last, "Counter") == EVENTS + 3  # the last view stays on the screen


def test_export_draws_a_progress_bar_in_a_terminal(
    counter_store: str, tmp_path: Path, panes: list[Pane]
) -> None:
    out = tmp_path / "counter.parquet"
    argv = command("export", "Counter", str(out), "--store", counter_store)
    pane = Pane(tmp_path / "tmux.sock", argv, tmp_path)
    panes.append(pane)
    assert pane.exit_status() == 0
    screen = pane.screen()
    bar = next(line for line in screen.splitlines() if "export Counter" in line)
    pattern = rf"export Counter ━+ {EVENTS}/{EVENTS} rows [\d,.]+ rows/s 0:00:0\d ETA 0:00:00$"
    assert re.search(pattern, bar.rstrip()), bar
    assert f"wrote {EVENTS} rows to {out}" in screen
