"""The README's scheduled-commands example runs (``readme_example.py`` is its code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).with_name("readme_example.py")
ROOT = Path(__file__).resolve().parents[2]

#: The README's mapper and given/when/then blocks (after the example's definitions).
MAPPER = """overdue = rv.EventMapper("overdue_orders")


@overdue.on(Placed)
def _(ev: rv.Envelope[Placed]) -> rv.Schedule:
    assert ev.aggregate_id is not None
    return rv.Schedule(Order, ev.aggregate_id, Expire(), after=timedelta(hours=1))
"""

GWT = """from reventless.testing import given, given_event

given(Order, aggregate_id="o-1").when(Place(total=5)).then_scheduled(
    rv.Schedule(Order, "o-1", Expire(), after=timedelta(minutes=30), id="expire:o-1")
)
given_event(overdue, "o-9", Placed(total=1)).then_scheduled(
    rv.Schedule(Order, "o-9", Expire(), after=timedelta(hours=1))
)
"""


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


def test_the_readme_mapper_and_gwt_blocks_run_after_the_example() -> None:
    definitions = EXAMPLE.read_text().replace("asyncio.run(main())", "")
    scope: dict[str, object] = {"__name__": "readme_schedules"}
    exec(compile(definitions + MAPPER + GWT, "readme", "exec"), scope)  # raises if they fail
    assert "overdue" in scope


def test_the_readme_shows_this_code() -> None:
    readme = (ROOT / "README.md").read_text()
    for code in (EXAMPLE.read_text(), MAPPER, GWT):
        assert code.strip() in readme
