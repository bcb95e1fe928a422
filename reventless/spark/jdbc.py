"""Reading a topic from PostgreSQL over JDBC into a typed Spark DataFrame.

Spark reads the topic's table in parallel slices of ``_offset``; the SQL values (ISO text
timestamps, JSON text, epoch microseconds, ...) are turned into the topic's typed Arrow
columns in the executors by the same codec the store uses for its own Arrow export, so
both sources give identical frames. The driver jar comes from Debian's
``libpostgresql-jdbc-java`` (see ``session.jdbc_jar``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..codec import META_NAMES, TopicSchema
from ..errors import StoreError
from ..store.database import Database
from ..store.swap import jdbc_location, jdbc_slice
from .arrow import spark_schema, to_spark
from .session import jdbc_jar

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _typed(schema_bytes: bytes, name: str) -> Any:
    """mapInArrow function: SQL-valued batches -> the topic's typed (Spark-form) batches."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        full = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        fields = pa.schema([f for f in full if f.name not in META_NAMES])
        ts = TopicSchema.from_arrow(name, fields)
        for batch in batches:
            cols = [c.to_pylist() for c in batch.columns]
            yield to_spark(ts.to_arrow(list(zip(*cols, strict=True))))

    return run


def read_jdbc(
    spark: SparkSession,
    db: Database,
    table: str,
    name: str,
    schema: pa.Schema,
    *,
    lower: int,
    upper: int,
    partitions: int = 4,
) -> DataFrame:
    """Offsets ``lower..upper`` of topic table ``table`` of the PostgreSQL store ``db`` as
    a typed DataFrame."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if jdbc_jar() is None:
        raise StoreError(
            "the PostgreSQL JDBC driver is missing: apt-get install libpostgresql-jdbc-java "
            "(or set REVENTLESS_JDBC_JAR)"
        )
    address, props = jdbc_location(db)
    query = jdbc_slice(table, schema.names, lower, upper)
    reader = spark.read.format("jdbc").option("url", address).option("dbtable", query)
    reader = reader.option("fetchsize", "10000")
    if upper > lower:
        reader = (
            reader.option("partitionColumn", "_offset")
            .option("lowerBound", str(lower))
            .option("upperBound", str(upper + 1))
            .option("numPartitions", str(max(1, partitions)))
        )
    for key, value in props.items():
        reader = reader.option(key, value)
    raw = reader.load()
    out = from_arrow_schema(spark_schema(schema))
    return raw.mapInArrow(_typed(schema.serialize().to_pybytes(), name), out)
