"""Run the installed ``reventless`` script and check what a user sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The console script pyproject installs beside the interpreter (not ``python -m``, which
#: puts the current directory on the path by itself and would hide a missing one).
SCRIPT = Path(sys.executable).with_name("reventless")
ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """The test's environment without PYTHONPATH: the script finds modules as a user's does."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def command(*args: str) -> list[str]:
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: install the project (pip install -e .)")
    return [str(SCRIPT), *args]


def reventless(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``reventless ARGS`` in ``cwd`` and wait for it."""
    return subprocess.run(
        command(*args), cwd=cwd, env=env(), capture_output=True, text=True, timeout=120
    )


def user_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Assert exit status 2 and one line on stderr (no traceback) holding ``needles``."""
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
