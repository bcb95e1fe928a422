"""Spark projections: the log as DataFrames, read models rebuilt with their own handlers.

Install the extra (``pip install 'reventless[spark]'``; Java 17 is needed at run time).
The core never imports this package; ``rv.spark`` imports it on first use.

Example::

    async with app:
        report = await rv.spark.rebuild(directory, app)            # local[*]
        df = await rv.spark.read_log(customers)                     # the log, typed
    spark.read.format("reventless").option("store", url).option("topic", "Order").load()
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "reventless.spark needs PySpark: pip install 'reventless[spark]' (and Java 17)"
    ) from exc

from .arrow import from_spark, spark_schema, to_spark
from .datasource import LogSource, register
from .fold import RebuildError
from .rebuild import RebuildReport, plan, rebuild
from .segments import SegmentExport, export_segments
from .session import default_master, jdbc_jar, session
from .source import Source, read_log
from .stream import StreamProgress, StreamQuery, Topics
from .streamcli import run_stream
from .streamfile import start_files
from .streamhandoff import hand_to_collector, hand_to_stream
from .streamrun import start_stream

__all__ = [
    "LogSource",
    "RebuildError",
    "RebuildReport",
    "SegmentExport",
    "Source",
    "StreamProgress",
    "StreamQuery",
    "Topics",
    "default_master",
    "export_segments",
    "from_spark",
    "hand_to_collector",
    "hand_to_stream",
    "jdbc_jar",
    "plan",
    "read_log",
    "rebuild",
    "register",
    "run_stream",
    "session",
    "spark_schema",
    "start_files",
    "start_stream",
    "to_spark",
]
