"""``reventless forget`` and ``reventless master-key``, run as a user runs them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import reventless as rv
from reventless.store.keys import MasterKey
from tests.cli.process import ROOT, reventless, user_error
from tests.personal.model import ADA, app_of, register_two

APP = "tests.personal.model:cli_app"


async def test_forget_from_the_command_line(tmp_path: Path, master_key: MasterKey) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    app, customers = app_of(url)
    async with app:
        await register_two(customers)
        await app.settle()
    done = reventless("forget", "c-1", "--app", APP, "--store", url, cwd=ROOT)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == "forgotten: 1 key(s) destroyed, 1 read-model row(s) erased"
    app, customers = app_of(url)
    async with app:
        assert (await customers.load("c-1")).name is rv.ERASED
        assert (await customers.load("c-2")).name != ADA


def test_forget_without_a_master_key_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REVENTLESS_MASTER_KEY")
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    done = reventless("forget", "c-1", "--app", APP, "--store", url, cwd=ROOT)
    user_error(done, "REVENTLESS_MASTER_KEY")


def test_master_key_prints_a_new_key() -> None:
    first = reventless("master-key", cwd=ROOT)
    second = reventless("master-key", cwd=ROOT)
    assert first.returncode == 0 and first.stdout != second.stdout
    assert len(MasterKey.parse(first.stdout).key) == 32


async def test_tail_opens_personal_fields_with_the_master_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    app, customers = app_of(url)
    async with app:
        await register_two(customers)
        await app.forget("c-2")
    shown = reventless("tail", "Customer", "--store", url, cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [x["data"].get("name") for x in lines] == [ADA, None, "[erased]"]


def test_tail_without_the_master_key_shows_sealed_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"

    async def write() -> None:
        app, customers = app_of(url)
        async with app:
            await register_two(customers)

    asyncio.run(write())
    monkeypatch.delenv("REVENTLESS_MASTER_KEY")
    shown = reventless("tail", "Customer", "--store", url, cwd=ROOT)
    assert shown.returncode == 0 and ADA not in shown.stdout
    assert json.loads(shown.stdout.splitlines()[0])["data"]["name"].startswith("rv1:")
