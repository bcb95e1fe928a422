"""Helpers of the streaming tests: a shop App, its log as a stream, read-model rows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import reventless as rv
from reventless.spark.stream import Reader
from reventless.store import require_sql
from reventless.store.readmodel import SqlReadModelTable


def copy_of(model: rv.ReadModel[Any], name: str) -> rv.ReadModel[Any]:
    """``model`` under another name (its own table), with the same handler functions."""
    copy: rv.ReadModel[Any] = rv.ReadModel(name, row=model.row, key=model.key)
    copy.handlers.update(model.handlers)
    copy.topic_handlers.update(model.topic_handlers)
    return copy


def segments_reader(app: rv.App, directory: Path) -> Reader:
    """The log's Parquet segments (``rv.spark.export_segments``) as a file stream."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from reventless.spark.arrow import spark_schema

    def read(spark: Any, topic: str, start: Any) -> Any:
        schema = app.topics[topic].schema.arrow_schema
        path = directory / topic
        path.mkdir(parents=True, exist_ok=True)
        struct = from_arrow_schema(spark_schema(schema))
        return spark.readStream.schema(struct).parquet(str(path))

    return read


async def export(app: rv.App, directory: Path) -> None:
    """Export every topic's new events as segments under ``directory/<topic>``."""
    from reventless.spark import export_segments

    for name, topic in app.topics.items():
        store = require_sql(topic.store, "export")
        await export_segments(store, store.topic(name), directory / name)


async def rows(app: rv.App, model: rv.ReadModel[Any]) -> list[Any]:
    """Every row of ``model``'s table in ``app``'s store."""
    store = require_sql(app.store, "rows")
    return await SqlReadModelTable(model, store.db).all()


class Read(rv.Event):
    """A sensor reading at a time of its own (event time is a field, not ``_produced_at``)."""

    at: datetime
    value: float


class Sensor(rv.Aggregate):
    events = Read
    count: int = 0

    @rv.applies(Read)
    def _read(self, e: Read) -> None:
        self.count += 1


class HourCount(BaseModel):
    id: str
    readings: int
    total: float


hour_counts: rv.ReadModel[HourCount] = rv.ReadModel("sensor_hours", row=HourCount, key="id")


def per_hour(topics: Any) -> Any:
    """Readings per sensor per hour of their ``at`` field, 10 minutes of lateness allowed."""
    from pyspark.sql import functions as F

    hourly = (
        topics["Sensor"]
        .withWatermark("at", "10 minutes")
        .groupBy(F.window("at", "1 hour"), F.col("_aggregate_id"))
        .agg(F.count(F.lit(1)).alias("readings"), F.sum("value").alias("total"))
    )
    return hourly.select(
        F.concat_ws("@", F.col("_aggregate_id"), F.date_format("window.start", "HH:mm")).alias(
            "id"
        ),
        F.col("readings"),
        F.col("total"),
    )
