"""The shop demo (``python -m examples.shop``, what ``make demo`` runs) on a store it
cannot open: one line on stderr and exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest


@pytest.mark.postgres
def test_a_database_that_does_not_exist_is_one_line_and_exit_2(pg_database: str) -> None:
    from sqlalchemy.engine import make_url

    missing = make_url(pg_database).set(database=f"rv_missing_{uuid.uuid4().hex[:8]}")
    out = subprocess.run(
        [sys.executable, "-m", "examples.shop", "--store", missing.render_as_string(), "--reset"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shop demo: cannot open store"), lines
    assert "does not exist" in lines[0]
