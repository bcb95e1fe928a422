"""The README's quick start is executed, so it cannot rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README has no quick start code"
    return match.group(1)


def test_readme_quick_start_runs(tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "rejected: already_registered" in out.stdout
    assert "name='Ada' address='2 Side St'" in out.stdout
    assert "address: string" in out.stdout
    assert (tmp_path / "quickstart.db").exists()


def test_readme_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert first_block and "make demo" in first_block.group(1)
    assert "make test" in first_block.group(1)
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
