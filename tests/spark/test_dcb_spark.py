"""A DCB log in Spark: frames carry the tags (``_tags`` as array<string>) from Parquet
segments and JDBC, and a read model over the log rebuilds to the live collector's rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import reventless as rv
from reventless.spark import from_spark, read_log, rebuild
from tests.spark.dcbmodel import CourseDefined, StudentSubscribed, courses_view

pytestmark = pytest.mark.spark


async def _fill(log: rv.DcbLog) -> None:
    await log.append([CourseDefined(course_id=f"c{i}", capacity=10 + i) for i in range(3)])
    for i in range(12):
        await log.append(
            [StudentSubscribed(course_id=f"c{i % 3}", student_id=f"s{i}")],
            tags=["term:2026"] if i % 2 else None,
        )


def _frame(df: Any, schema: pa.Schema) -> pa.Table:
    table = df.toArrow().sort_by("_offset")
    return pa.Table.from_batches([from_spark(b, schema) for b in table.to_batches()], schema)


async def _same_frame(spark: Any, url: str, source: str, workdir: Path) -> None:
    app = rv.App(store=url)
    log = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)
    async with app:
        await _fill(log)
        df = await read_log(log.topic, spark=spark, source=source, workdir=workdir)
        got = _frame(df, log.topic.arrow_schema)
        want = pa.Table.from_batches(
            [b async for b in log.topic.read_batches()], log.topic.arrow_schema
        )
        assert got.equals(want)
        tags = got.column("_tags").to_pylist()
        assert tags[0] == ["course:c0"]
        assert tags[4] == ["course:c1", "student:s1", "term:2026"]
        n = df.where("array_contains(_tags, 'term:2026')").count()
        assert n == 6


async def test_parquet_frame_carries_tags(spark: Any, workdir: Path, file_url: str) -> None:
    await _same_frame(spark, file_url, "parquet", workdir)


@pytest.mark.postgres
async def test_jdbc_frame_carries_tags(spark: Any, workdir: Path, pg_url: str) -> None:
    await _same_frame(spark, pg_url, "jdbc", workdir)


async def test_rebuild_of_a_dcb_read_model_equals_live(
    spark: Any, workdir: Path, file_url: str
) -> None:
    app = rv.App(store=file_url)
    log = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)
    view = app.collect(courses_view)
    async with app:
        await _fill(log)
        await app.settle()
        live = sorted(await view.all(), key=lambda r: r.course_id)
        assert [r.students for r in live] == [4, 4, 4]
        report = await rebuild(courses_view, app, spark=spark, workdir=workdir)
        assert report.rows == 3
        assert sorted(await view.all(), key=lambda r: r.course_id) == live
        await log.append([StudentSubscribed(course_id="c0", student_id="s99")])
        await app.settle()  # the live collector continues after the rebuild's offsets
        assert (await view.get("c0")).students == 5  # type: ignore[union-attr]
