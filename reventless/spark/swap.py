"""Blue/green read-model tables, the Spark side: version names, staged rows, catch-up.

The rebuilt rows go into a fresh table version (``rm_<name>__<hex>``) that no query sees;
``reventless.store.swap`` loads it and swaps it in in one transaction that also brings it
up to the live collector's checkpoints with ``catch_up`` (the read model's own handlers,
in the collector's order) and moves the checkpoints: the live collector then continues
on the new table, nothing applied twice or missed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ..codec import META_NAMES
from ..collect.component import ReadModel
from ..store.database import table_name
from ..store.swap import CatchUp, Spans, SwapWriter
from .fold import Folder, TopicPlan, decode, opened_rows, schema_of
from .keysource import KeySource

_CHUNK = 50_000


def version_name(model: ReadModel[Any], suffix: str | None = None) -> str:
    """A new, unused table name for a version of ``model``'s table."""
    base = table_name("rm_", model.name)[:44]
    return f"{base}__{suffix or uuid.uuid4().hex[:10]}"


def staged_rows(directory: Path) -> Iterator[list[tuple[Any, ...]]]:
    """Chunks of SQL rows from the Parquet files a Spark job staged in ``directory``."""
    files = sorted(str(p) for p in directory.glob("*.parquet"))
    if not files:
        return
    for batch in ds.dataset(files, format="parquet").to_batches(batch_size=_CHUNK):
        if batch.num_rows:
            cols = [c.to_pylist() for c in batch.columns]
            yield list(zip(*cols, strict=True))


def catch_up(
    model: ReadModel[Any], plans: Sequence[TopicPlan], keys: KeySource | None = None
) -> CatchUp:
    """The swap's catch-up: apply the events the live collector processed after the
    rebuild's offsets (``spans``: partition -> (after, upto)) to the new table version with
    the model's handlers, in the collector's order (runs inside the swap transaction;
    ``keys`` opens personal fields)."""

    def run(txn: SwapWriter, spans: Spans) -> int:
        folder = Folder(model)
        state: dict[Any, Any] = {}
        applied = 0
        for plan in plans:
            schema = schema_of(plan.recipe)
            names = [*META_NAMES, *(c.name for c in schema.columns)]
            for (topic, part), (after, upto) in sorted(spans.items()):
                if topic != plan.name:
                    continue
                rows = txn.events(topic, part, after, upto, names)
                for row in opened_rows(schema, rows, keys):
                    spec = plan.handler(row[5])
                    if spec is None:
                        continue
                    ev = decode(schema, topic, row)
                    key = spec.key(ev)
                    if key not in state:
                        state.update(txn.fetch([key]))
                        state.setdefault(key, None)
                    folder.apply(state, ev, spec)
                    applied += 1
        txn.write(state)
        return applied

    return run


def arrow_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """SQL rows of an Arrow batch (column order kept)."""
    return list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
