"""``reventless schedules`` lists pending and dead-lettered schedules; ``reventless
redrive-schedules`` makes dead ones due again. Both read and write the store only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.cli import main
from tests.cli.process import reventless, user_error
from tests.schedule.model import EXPIRY, START, Expire, Order, Place


@pytest.fixture
def schedules_db(tmp_path: Path) -> str:
    """A store with one dead-lettered schedule (expire:o-2) and one pending (expire:o-1)."""
    url = f"sqlite:///{tmp_path / 'schedules.db'}"

    async def fill() -> None:
        clock = rv.ManualClock(START)
        app = rv.App(store=url, options=rv.AppOptions(clock=clock))
        orders = app.event_log(Order)
        async with app:
            await orders.execute("o-2", Place(total=1))
            await orders.execute("o-2", Expire())
            [dead] = await app.scheduler.advance(EXPIRY)  # refused: dead-lettered
            assert dead.dead
            await orders.execute("o-1", Place(total=1))

    asyncio.run(fill())
    return url


def rows(out: str) -> dict[str, dict[str, Any]]:
    """``schedules --json``'s output by schedule id."""
    return {s["id"]: s for s in json.loads(out)}


FIELDS = ("status", "due_at", "topic", "aggregate_id", "command_type", "attempts")


def test_schedules_lists_pending_then_dead(
    schedules_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schedules", "--store", schedules_db]) == 0
    table = capsys.readouterr().out
    headers = ("id", "status", "due", "topic", "aggregate", "command", "attempts", "error")
    assert all(h in table for h in headers)
    assert "expire:o-1" in table and "Rejected not_open" in table
    assert main(["schedules", "--store", schedules_db, "--json"]) == 0
    got = rows(capsys.readouterr().out)
    assert list(got) == ["expire:o-1", "expire:o-2"]
    pending = ["pending", "2030-01-01T13:00:00+00:00", "Order", "o-1", "Expire", 0]
    dead = ["dead", "2030-01-01T12:30:00+00:00", "Order", "o-2", "Expire", 1]
    assert [got["expire:o-1"][f] for f in FIELDS] == pending
    assert [got["expire:o-2"][f] for f in FIELDS] == dead
    assert "Rejected not_open" in got["expire:o-2"]["error"]
    assert main(["schedules", "--store", schedules_db, "--status", "dead", "--json"]) == 0
    assert list(rows(capsys.readouterr().out)) == ["expire:o-2"]


def test_redrive_schedules_makes_dead_ones_due_now(
    schedules_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["redrive-schedules", "--store", schedules_db, "nope"]) == 0
    assert capsys.readouterr().out == "redriven: 0\n"
    assert main(["redrive-schedules", "--store", schedules_db]) == 0
    assert capsys.readouterr().out == "redriven: 1\n"
    assert main(["schedules", "--store", schedules_db, "--status", "dead", "--json"]) == 0
    assert rows(capsys.readouterr().out) == {}
    assert main(["schedules", "--store", schedules_db, "--status", "pending", "--json"]) == 0
    assert sorted(rows(capsys.readouterr().out)) == ["expire:o-1", "expire:o-2"]


def test_the_installed_command_lists_schedules(schedules_db: str, tmp_path: Path) -> None:
    result = reventless("schedules", "--store", schedules_db, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    assert "expire:o-1" in result.stdout and "expire:o-2" in result.stdout
    missing = reventless("schedules", "--store", f"sqlite:///{tmp_path / 'no.db'}", cwd=tmp_path)
    user_error(missing, "no store at")
    bad = reventless("schedules", "--store", schedules_db, "--status", "gone", cwd=tmp_path)
    user_error(bad, "--status", "'gone' is not one of")
