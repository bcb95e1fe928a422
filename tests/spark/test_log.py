"""The log in Spark: typed frames from incremental Parquet segments and from JDBC."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import reventless as rv
from reventless.spark import from_spark, read_log, spark_schema
from reventless.spark.segments import export_segments, segments
from tests.spark.model import Address, Noted, Record, Recorded

pytestmark = pytest.mark.spark


def recorded(i: int) -> Recorded:
    return Recorded(
        at=datetime(2024, 1, 1, 12, 0, i % 60, 123456, tzinfo=UTC),
        day=date(2024, 2, 1 + i % 28),
        opens=time(8, i % 60, 30, 654321),
        took=timedelta(days=i, microseconds=7),
        price=Decimal(f"{i}.25"),
        note=Decimal("3.141592653589793238462643383279"),
        tags=[f"t{i}", "x"],
        scores={"a": i, "b": -i},
        home=Address(street=f"{i} Main St", zip=10_000 + i),
        blob=bytes([i % 256, 0, 255]),
        ok=i % 2 == 0,
        ratio=i / 7,
    )


async def fill(log: rv.EventLog[Record], start: int, n: int) -> None:
    for i in range(start, start + n):
        await log.append(f"r-{i % 5}-{i}", [recorded(i)], expected_version=0)
        await log.append(f"n-{i}", [Noted(text=f"note {i}", opens=None)], expected_version=0)


def spark_rows(df: Any, schema: pa.Schema) -> pa.Table:
    table = df.toArrow().sort_by("_offset")
    return pa.Table.from_batches([from_spark(b, schema) for b in table.to_batches()], schema)


async def store_rows(log: rv.EventLog[Record]) -> pa.Table:
    batches = [b async for b in log.read_batches()]
    return pa.Table.from_batches(batches, log.arrow_schema)


def test_spark_schema_replaces_time_and_duration() -> None:
    schema = rv.TopicSchema.from_events("Record", [Recorded, Noted]).arrow_schema
    safe = spark_schema(schema)
    assert safe.field("opens").type == pa.int64() and safe.field("took").type == pa.int64()
    assert safe.field("at").type == schema.field("at").type
    assert [f.name for f in safe.field("home").type] == ["street", "zip"]


async def test_segments_are_incremental_and_typed(spark: Any, workdir: Path, file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 30)
        df = await read_log(log, spark=spark, workdir=workdir)
        assert spark_rows(df, log.arrow_schema).equals(await store_rows(log))
        where = workdir / "segments" / "ev_record"
        assert [(a, b) for a, b, _ in segments(where)] == [(1, 60)]
        await fill(log, 30, 5)
        done = await export_segments(app.store, log.definition, where)
        assert (done.rows, done.upto, done.files) == (10, 70, 2)
        again = await export_segments(app.store, log.definition, where)
        assert (again.rows, again.upto, again.files) == (0, 70, 2)
        df = await read_log(log, spark=spark, workdir=workdir)
        assert df.count() == 70
        assert spark_rows(df, log.arrow_schema).equals(await store_rows(log))
        old = await read_log(log, spark=spark, workdir=workdir, upto=20)
        assert sorted(r["_offset"] for r in old.select("_offset").collect()) == list(range(1, 21))


@pytest.mark.postgres
async def test_jdbc_reads_the_same_typed_frame(spark: Any, workdir: Path, pg_url: str) -> None:
    app = rv.App(store=pg_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 20)
        expected = await store_rows(log)
        via_jdbc = await read_log(log, spark=spark, source="jdbc")
        via_parquet = await read_log(log, spark=spark, source="parquet", workdir=workdir)
        assert spark_rows(via_jdbc, log.arrow_schema).equals(expected)
        assert spark_rows(via_parquet, log.arrow_schema).equals(expected)


async def test_spark_sql_over_the_log(spark: Any, workdir: Path, file_url: str) -> None:
    """The README's ad-hoc query example."""
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 10)
        df = await read_log(log, spark=spark, workdir=workdir)
        df.createOrReplaceTempView("record_log")
        rows = spark.sql(
            "SELECT _type, count(*) AS n, max(_offset) AS last FROM record_log "
            "GROUP BY _type ORDER BY _type"
        ).collect()
        assert [(r["_type"], r["n"], r["last"]) for r in rows] == [
            ("Noted", 10, 20),
            ("Recorded", 10, 19),
        ]
