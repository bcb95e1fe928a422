"""The README's scheduled-commands example runs (``readme_example.py`` is its code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).with_name("readme_example.py")
ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_example_expires_the_unpaid_order(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "pending: ['expire:o-1']",
        "fired: [('expire:o-1', True)]",
        "o-1: expired o-2: paid",
    ]
    assert (tmp_path / "orders.db").exists()
