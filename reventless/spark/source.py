"""A topic's log as a Spark DataFrame: from Parquet segments or from PostgreSQL (JDBC).

Example::

    spark = rv.spark.session()
    df = await rv.spark.read_log(customers, spark=spark)    # after `async with app`
    df.createOrReplaceTempView("customers")
    spark.sql("SELECT _type, count(*) AS n FROM customers GROUP BY _type").show()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from ..dcb import DcbLog
from ..errors import SpecError
from ..eventlog import EventLog
from ..store import SqlEventStore, Store, require_sql
from ..topic import Topic
from ..topicdef import TopicDef
from .arrow import spark_schema
from .fold import Recipe, recipe_of, schema_of
from .jdbc import read_jdbc
from .keysource import KeySource
from .segments import export_segments

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Source = Literal["auto", "parquet", "jdbc"]


def default_workdir() -> Path:
    """Where segments and staging files go: ``REVENTLESS_SPARK_DIR`` or ``.reventless/spark``."""
    return Path(os.environ.get("REVENTLESS_SPARK_DIR") or Path(".reventless") / "spark")


def pick_source(store: SqlEventStore, source: Source) -> Literal["parquet", "jdbc"]:
    """``auto``: JDBC on PostgreSQL, Parquet segments on SQLite."""
    if source == "auto":
        return "parquet" if store.db.is_sqlite else "jdbc"
    if source == "jdbc" and store.db.is_sqlite:
        raise SpecError("source='jdbc' needs a PostgreSQL store")
    if source not in ("parquet", "jdbc"):
        raise SpecError(f"source must be 'auto', 'parquet' or 'jdbc', not {source!r}")
    return source


async def log_frame(
    spark: SparkSession,
    log: Store,
    topic: TopicDef,
    *,
    upto: int,
    source: Source = "auto",
    workdir: Path | None = None,
) -> DataFrame:
    """Offsets ``1..upto`` of ``topic`` as a DataFrame of its (Spark-form) typed schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    store = require_sql(log, "reading a log into Spark")
    arrow = topic.schema.arrow_schema
    if pick_source(store, source) == "jdbc":
        parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
        return read_jdbc(
            spark,
            store.db,
            store.table_of(topic.name),
            topic.name,
            arrow,
            lower=1,
            upper=upto,
            partitions=parts,
        )
    where = (workdir or default_workdir()) / "segments" / store.table_of(topic.name)
    done = await export_segments(store, topic, where, upto=upto)
    struct = from_arrow_schema(spark_schema(arrow))
    if done.files == 0:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(str(where)).where(f"_offset <= {int(upto)}")


def shown(
    recipe: Recipe, keys: KeySource
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` function: batches of a topic's frame with each personal column as
    text to show (a string as itself, another value as its JSON text, ``"[erased]"``
    once its subject is forgotten)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = schema_of(recipe)
        ring = keys.keyring()
        for batch in batches:
            yield ring.open_batch(schema, batch)

    return run


async def read_log(
    topic: Topic | DcbLog,
    *,
    spark: SparkSession | None = None,
    upto: int | None = None,
    source: Source = "auto",
    workdir: str | Path | None = None,
    opened: bool = False,
) -> DataFrame:
    """The log of a built topic (an EventLog, a DCB log) up to ``upto`` (default: its head) as a
    typed DataFrame. Parquet segments are exported incrementally first (only offsets
    not exported before); ``source="jdbc"`` reads PostgreSQL directly. ``time`` and
    ``timedelta`` fields are int64 microseconds on the Spark side (see ``arrow.py``).

    Personal fields (``rv.Personal``) hold their sealed text unless ``opened``: then the
    executors open them (the master key travels with the job, see ``KeySource``) into
    text to show, ``"[erased]"`` for a forgotten subject. What you write out of an opened
    frame is a copy of personal data that ``App.forget`` cannot reach.

    Example::

        df = await rv.spark.read_log(customers, opened=True)
        df.select("customer_id", "name").show()
    """
    from .session import session

    if isinstance(topic, DcbLog):
        topic = topic.topic
    head = await topic.head() if upto is None else upto
    df = await log_frame(
        spark or session(),
        topic.store,
        topic.definition,
        upto=head,
        source=source,
        workdir=Path(workdir) if workdir is not None else None,
    )
    schema = topic.schema
    if not opened or not schema.personal:
        return df
    spec = topic.spec if isinstance(topic, EventLog) else None
    recipe = recipe_of(topic.name, schema, spec)
    return df.mapInArrow(shown(recipe, KeySource.of(topic.store)), df.schema)
