"""Bad input stops a rebuild with the event named, and leaves the live table alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.spark import RebuildError, rebuild
from tests.spark.evolve import (
    CreatedUp,
    CreatedV1,
    Ghost,
    PersonV1,
    PersonV2,
    PersonV2Up,
    people,
    people_up,
    wrong_key,
)

pytestmark = pytest.mark.spark


async def _old_log(url: str, *, ghost: bool) -> None:
    app = rv.App(store=url)
    log = app.event_log(PersonV1)
    async with app:
        await log.append("p-1", [CreatedV1(name="Ada")], expected_version=0)
        if ghost:
            await log.append("p-1", [Ghost()], expected_version=1)


async def _tables(app: rv.App) -> list[str]:
    return await app.store.db.read(
        lambda c: [
            r[0]
            for r in c.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rm_%'"
            )
        ]
    )


async def test_an_event_that_no_longer_decodes_stops_the_rebuild(
    spark: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _old_log(url, ghost=False)
    app = rv.App(store=url)
    app.event_log(PersonV2)
    async with app:
        with pytest.raises(RebuildError) as err:
            await rebuild(people, app, spark=spark, workdir=tmp_path / "w")
        assert (err.value.topic, err.value.offset, err.value.event_type) == ("Person", 1, "Created")
        assert "upcaster" in str(err.value)
        assert await _tables(app) == []  # nothing half-written: the new version is dropped


async def test_an_upcaster_lets_the_rebuild_through(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _old_log(url, ghost=False)
    app = rv.App(store=url)
    app.event_log(PersonV2Up)
    view = app.collect(people_up)
    async with app:
        await app.settle()
        live = await view.all()
        await rebuild(people_up, app, spark=spark, workdir=tmp_path / "w")
        assert await view.all() == live and live[0].nick == "ada"


async def test_an_unknown_event_type_stops_the_rebuild(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _old_log(url, ghost=True)
    app = rv.App(store=url)
    log = app.event_log(PersonV2Up)
    async with app:
        await log.append("p-2", [CreatedUp(name="Bo", nick="b")], expected_version=0)
        with pytest.raises(RebuildError) as err:
            await rebuild(people_up, app, spark=spark, workdir=tmp_path / "w")
        assert (err.value.offset, err.value.event_type) == (2, "Ghost")
        assert "unknown event type" in str(err.value)


async def test_a_handler_writing_another_key_stops_the_rebuild(spark: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    await _old_log(url, ghost=False)
    app = rv.App(store=url)
    app.event_log(PersonV2Up)
    async with app:
        with pytest.raises(RebuildError, match="wrote key 'Ada'"):
            await rebuild(wrong_key, app, spark=spark, workdir=tmp_path / "w")


async def test_a_read_model_without_a_key_fails_before_spark_runs(tmp_path: Path) -> None:
    app = rv.App(store=f"sqlite:///{tmp_path / 's.db'}")
    app.event_log(PersonV2Up)
    keyless: rv.ReadModel[Any] = rv.ReadModel("keyless", row=people_up.row, key="id")
    keyless.handlers.update(people_up.handlers)
    keyless.key = ""
    with pytest.raises(rv.SpecError, match="needs a key"):
        await rebuild(keyless, app, master="local[1]")
    mapper = rv.EventMapper("not_a_table")
    with pytest.raises(rv.SpecError, match="only ReadModels"):
        await rebuild(mapper, app)  # type: ignore[arg-type]
