"""The same streaming pipeline into files: Parquet partitioned by date (a lakehouse feed).

Spark's own file sink writes each micro-batch's files and records them in the output's
``_spark_metadata`` log in the batch's commit, so readers of the directory through Spark
see every row exactly once across crashes and restarts (files of a batch that did not
commit are left out). Rows are appended: a pipeline with an aggregation must emit each
row once (append mode: a window is written when the watermark passes its end).

Example::

    lines = start_files(order_lines, app, "lake/order_lines", partition_by=("date",))
    spark.read.parquet("lake/order_lines").groupBy("date").count().show()
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StreamError
from ..store.database import table_name
from .source import default_workdir
from .stream import (
    Pipeline,
    Reader,
    StreamQuery,
    Topics,
    parse_trigger,
    reventless_reader,
    store_url,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..app import App


def start_files(
    pipeline: Pipeline,
    app: App,
    path: str | Path,
    *,
    spark: SparkSession | None = None,
    master: str | None = None,
    checkpoint: str | Path | None = None,
    partition_by: Sequence[str] = ("date",),
    trigger: str | float | None = "5s",
    reader: Reader | None = None,
    file_format: str = "parquet",
) -> StreamQuery:
    """Start writing ``pipeline``'s rows (over ``app``'s topics) as ``file_format`` files
    under ``path``, partitioned by the ``partition_by`` columns (see the module
    docstring). ``checkpoint`` defaults to ``<workdir>/streams/files-<dir name>``."""
    from .session import session

    kwargs = parse_trigger(trigger)
    spark = spark or session(master)
    out = Path(path)
    where = (
        Path(checkpoint)
        if checkpoint is not None
        else default_workdir() / "streams" / f"files-{table_name('', out.name)}"
    )
    url = store_url(app)
    topics = Topics(spark, list(app.topics), reader or reventless_reader(url), {}, url)
    df = pipeline(topics)
    missing = [c for c in partition_by if c not in df.columns]
    if missing:
        raise StreamError(
            f"partition column(s) {', '.join(missing)} are not columns of the pipeline's rows "
            f"({', '.join(df.columns)})"
        )
    query = (
        df.writeStream.format(file_format)
        .outputMode("append")
        .partitionBy(*partition_by)
        .option("path", str(out))
        .option("checkpointLocation", str(where))
        .trigger(**kwargs)
        .start()
    )
    from .streamrun import watch

    running = StreamQuery(f"files:{out.name}", query, None)
    watch(running, {}, None)
    return running
