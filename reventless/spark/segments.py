"""Incremental Parquet segments of a topic: each export writes only the new offsets.

A topic's segment directory holds files ``seg-<first>-<last>.parquet`` (offsets padded to
20 digits, so names sort in offset order) in the topic's Spark-readable schema (see
``arrow.py``), plus ``_reventless.json`` naming the topic and the store-side identity of
the topic (its creation time): a directory exported from an older incarnation of the
topic (a dropped and recreated store) is cleared instead of mixed in. Files are written
under a hidden name and renamed into place, so a crash never leaves a half segment where
Spark reads (Spark skips names starting with ``_`` and ``.``).

Example::

    done = await export_segments(app.store, customers.definition, "segments/customers")
    print(done.rows, "new rows; segments cover offsets 1 ..", done.upto)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..codec import OFFSET_AT
from ..codec.ipc import parquet_compression
from ..errors import StoreError
from ..store.sql import SqlEventStore
from ..store.swap import SqlRebuildLog
from ..topicdef import TopicDef
from .arrow import spark_schema, to_spark

_SEGMENT = re.compile(r"^seg-(\d{20})-(\d{20})\.parquet$")
_MANIFEST = "_reventless.json"


@dataclass(frozen=True, slots=True)
class SegmentExport:
    """Outcome of an export: new rows written, the last offset covered, segment files."""

    directory: Path
    rows: int
    upto: int
    files: int


def segments(directory: Path) -> list[tuple[int, int, Path]]:
    """The segment files of ``directory`` as ``(first, last, path)`` in offset order;
    raises ``StoreError`` if they do not cover ``1..last`` without gaps or overlaps."""
    found = []
    for p in directory.iterdir() if directory.is_dir() else ():
        m = _SEGMENT.match(p.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), p))
    found.sort()
    expect = 1
    for first, last, p in found:
        if first != expect:
            raise StoreError(f"segment {p.name} starts at {first}, expected {expect}")
        expect = last + 1
    return found


async def export_segments(
    store: SqlEventStore,
    topic: TopicDef,
    directory: str | Path,
    *,
    upto: int | None = None,
    page_size: int = 100_000,
    rows_per_file: int = 2_000_000,
) -> SegmentExport:
    """Append the topic's offsets after the last exported one (up to ``upto``, default the
    current head) as new segment files; earlier segments are never rewritten. Files use
    the topic's ``compression`` as their Parquet codec (snappy where that is ``"none"``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    created_at = await SqlRebuildLog(store).incarnation(topic.name)
    identity = {"topic": topic.name, "created_at": created_at}
    manifest = directory / _MANIFEST
    if manifest.exists() and json.loads(manifest.read_text()) != identity:
        shutil.rmtree(directory)  # segments of an older incarnation of this topic
        directory.mkdir(parents=True)
    if not manifest.exists():
        tmp = directory / f".{_MANIFEST}.tmp"
        tmp.write_text(json.dumps(identity))
        os.replace(tmp, manifest)
    existing = segments(directory)
    done = existing[-1][1] if existing else 0
    head = await store.head(topic.name) if upto is None else upto
    files, rows = len(existing), 0
    if head <= done:
        return SegmentExport(directory, 0, done, files)
    schema = spark_schema(topic.schema.arrow_schema)
    writer: pq.ParquetWriter | None = None
    first = last = 0
    tmp = directory / ".segment.tmp"

    def close() -> None:
        nonlocal writer, files
        if writer is not None:
            writer.close()
            writer = None
            os.replace(tmp, directory / f"seg-{first:020d}-{last:020d}.parquet")
            files += 1

    try:
        async for page in store.stream(topic.name, done + 1, page_size, upto=head):
            batch: pa.RecordBatch = to_spark(topic.schema.to_arrow(page))
            if writer is None:
                codec = parquet_compression(topic.compression)
                writer = pq.ParquetWriter(str(tmp), schema, compression=codec)
                first = int(page[0][OFFSET_AT])
            writer.write_batch(batch)
            last = int(page[-1][OFFSET_AT])
            rows += len(page)
            if last - first + 1 >= rows_per_file:
                close()
        close()
    finally:
        if writer is not None:
            writer.close()
            tmp.unlink(missing_ok=True)
    return SegmentExport(directory, rows, max(done, last), files)
