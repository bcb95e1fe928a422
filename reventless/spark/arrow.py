"""The Spark boundary of a topic's Arrow schema.

Spark 4.0 has no type for Arrow ``time64`` and reads ``duration`` columns from Parquet
as plain integers, so both cross the boundary as int64 microseconds (since midnight,
resp. of the duration) and are cast back exactly on the way out. Everything else
(timestamps in UTC, dates, decimals, binaries, lists, maps, structs) maps one to one.
The conversions here are pure pyarrow: they run on the driver and in executors.

Example::

    safe = spark_schema(topic.arrow_schema)        # what Spark sees
    back = from_spark(to_spark(batch), topic.arrow_schema)
    assert back.equals(batch)
"""

from __future__ import annotations

import pyarrow as pa

#: Field metadata on a Spark-side column that was a time64/duration before.
SPARK_TYPE_KEY = b"reventless.spark.type"


def spark_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every time64/duration (also nested) replaced by int64 microseconds and
    nested fields nullable (Spark gives the children of a null struct null values)."""
    if pa.types.is_time(t) or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, spark_type(f.type), True, f.metadata) for f in list(t)])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field, t.item_field.with_type(spark_type(t.item_type)).with_nullable(True)
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(t.value_field.with_type(spark_type(t.value_type)).with_nullable(True))
    return t


def spark_schema(schema: pa.Schema) -> pa.Schema:
    """The Spark-readable form of a topic schema (see the module docstring)."""
    fields = []
    for f in schema:
        safe = spark_type(f.type)
        if safe.equals(f.type):
            fields.append(f)
        else:
            meta = dict(f.metadata or {})
            meta[SPARK_TYPE_KEY] = str(f.type).encode()
            fields.append(pa.field(f.name, safe, f.nullable, meta))
    return pa.schema(fields, metadata=schema.metadata)


def to_spark(data: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of a topic schema, cast to its Spark form."""
    target = spark_schema(data.schema)
    if target.equals(data.schema, check_metadata=False):
        return data
    return pa.RecordBatch.from_arrays(
        [
            c if c.type.equals(f.type) else c.cast(f.type)
            for c, f in zip(data.columns, target, strict=True)
        ],
        schema=target,
    )


def from_spark(data: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch that came out of Spark, cast back to the topic schema ``schema``.

    Columns are matched by name; a column Spark does not have (added to the topic after
    the data was exported) becomes nulls."""
    names = data.schema.names
    arrays = []
    for f in schema:
        if f.name not in names:
            arrays.append(pa.nulls(data.num_rows, f.type))
            continue
        arrays.append(_cast(data.column(names.index(f.name)), f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _cast(arr: pa.Array, target: pa.DataType) -> pa.Array:
    if arr.type.equals(target):
        return arr
    if pa.types.is_struct(target) and arr.null_count:
        # Spark fills the children of a null struct with nulls, which a plain cast
        # rejects for NOT NULL child fields: cast the children, keep the parent's mask.
        kids = [_cast(k, target.field(i).type) for i, k in enumerate(arr.flatten())]
        return pa.StructArray.from_arrays(kids, fields=list(target), mask=arr.is_null())
    return arr.cast(target)
