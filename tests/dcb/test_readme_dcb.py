"""The README's DCB example (``readme_example.py``) and its given/when/then snippet
(``readme_gwt.py``, the same code as the README) run as scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = Path(__file__).with_name("readme_example.py")


def test_the_readme_dcb_example_runs(tmp_path: Path) -> None:
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
        "ada: subscribed at position 2",
        "bob: subscribed at position 3",
        "cy: rejected: course_full",
        "1 CourseDefined ('course:c1',)",
        "2 StudentSubscribed ('student:ada', 'course:c1')",
        "3 StudentSubscribed ('student:bob', 'course:c1')",
    ]


def test_the_readme_dcb_given_when_then_snippet_runs(tmp_path: Path) -> None:
    definitions = EXAMPLE.read_text().replace("asyncio.run(main())\n", "")
    script = tmp_path / "gwt.py"
    script.write_text(definitions + EXAMPLE.with_name("readme_gwt.py").read_text())
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def test_the_readme_shows_this_code() -> None:
    readme = (ROOT / "README.md").read_text()
    assert EXAMPLE.read_text().strip() in readme
    gwt = EXAMPLE.with_name("readme_gwt.py").read_text()
    assert "".join(gwt.splitlines(keepends=True)[2:]).strip() in readme  # after 2 comment lines
