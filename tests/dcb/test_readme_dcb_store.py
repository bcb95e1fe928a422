"""The README's DCB storage example (tags, a query, a conditional append) runs.

``SNIPPET`` is the README's code block, verbatim; the lead's README test may read it from
README.md instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = '''
import asyncio
from typing import Annotated

import reventless as rv


class UsernameClaimed(rv.Event):
    username: Annotated[str, rv.Tag("username")]  # tag "username:<value>"
    user_id: Annotated[str, rv.Tag("user")]


class UsernameReleased(rv.Event):
    username: Annotated[str, rv.Tag("username")]


app = rv.App(store="sqlite:///accounts.db")
accounts = app.dcb_log("accounts", events=UsernameClaimed | UsernameReleased)


async def claim(username: str, user_id: str) -> int:
    """Claim a free username; at most one writer wins, in any number of processes."""
    query = rv.Query.of(types=[UsernameClaimed, UsernameReleased], tags=[f"username:{username}"])
    seen = await accounts.read(query)  # the events this decision needs, in log order
    if seen and seen[-1].type == "UsernameClaimed":
        raise rv.Rejected("taken", username)
    position = seen[-1].offset if seen else 0
    result = await accounts.append(
        [UsernameClaimed(username=username, user_id=user_id)],
        condition=rv.AppendCondition(query, after=position),  # nothing new since we read
    )
    return result.last_offset


async def main() -> None:
    async with app:
        print("claimed at", await claim("ada", "u1"))
        try:
            await claim("ada", "u2")
        except rv.Rejected as r:
            print("rejected:", r.code)
        # a writer that read before the claim landed: its condition fails, nothing lands
        stale = rv.AppendCondition(rv.Query.of(tags=["username:ada"]), after=0)
        try:
            await accounts.append([UsernameClaimed(username="ada", user_id="u3")], condition=stale)
        except rv.AppendConditionError as e:
            print("condition failed at position", e.position)
        await accounts.append([UsernameReleased(username="ada")])
        print("claimed again at", await claim("ada", "u2"))
        for env in await accounts.read(rv.Query.of(tags=["user:u2"])):
            print(env.offset, env.type, env.tags)


asyncio.run(main())
'''


def test_readme_dcb_store_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "accounts.py"
    script.write_text(SNIPPET)
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
    assert out.stdout.splitlines() == [
        "claimed at 1",
        "rejected: taken",
        "condition failed at position 1",
        "claimed again at 3",
        "3 UsernameClaimed ('username:ada', 'user:u2')",
    ]


def test_the_snippet_is_the_readmes() -> None:
    assert SNIPPET.strip() in (ROOT / "README.md").read_text()
