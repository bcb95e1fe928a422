"""Helpers of the streaming tests: a shop App, its log as a stream, read-model rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
