"""The reventless CLI against a real store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import reventless as rv
from reventless.cli import main
from tests.model import Counter, Increment, totals


@pytest.fixture
def shop_db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    async def fill() -> None:
        app = rv.App(store=url)
        log = app.event_log(Counter)
        app.collect(totals)
        async with app:
            for i in range(12):
                await log.execute(f"c-{i % 3}", Increment(by=i + 1))
            await app.settle()

    asyncio.run(fill())
    return url


def test_topics_lists_heads_and_lag(shop_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", "--store", shop_db]) == 0
    out = capsys.readouterr().out
    assert "Counter" in out and "12" in out
    assert "counter_totals" in out


def test_tail_prints_json_lines(shop_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", "Counter", "--store", shop_db, "--from", "11"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["offset"] for x in lines] == [11, 12]
    assert lines[0]["data"] == {"by": 11} and lines[0]["_type"] == "Incremented"


def test_export_writes_typed_parquet(shop_db: str, tmp_path: Path) -> None:
    out = tmp_path / "counter.parquet"
    assert main(["export", "Counter", str(out), "--store", shop_db]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 12 and table.column("by").to_pylist() == list(range(1, 13))
    assert str(table.schema.field("_produced_at").type) == "timestamp[us, tz=UTC]"


def test_unknown_topic_is_a_clear_error(shop_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", "Nope", "--store", shop_db]) == 2
    assert "no topic 'Nope'" in capsys.readouterr().err


def test_dead_letters_listing(shop_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dead-letters", "--store", shop_db]) == 0
    assert "component" in capsys.readouterr().out
