"""Collector ``where=`` pushdown: topic offsets/s a read model gets through when its
predicate keeps 10% of a topic, beside the same read model filtering in its handler, in
catch-up (store reads) and live (broker batches), on one SQLite file.
``python -m bench.collector_where --rows 100000 --out BENCHMARKS.md``
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel

import reventless as rv
from bench.blocks import rows_main

SCHEMA = pa.schema([pa.field("k", pa.string()), pa.field("qty", pa.int64())])
KEYS = [f"o-{i}" for i in range(1, 11)]  # 10 of 100 keys: 10% of the rows
WHERE = "key IN ({})".format(", ".join(f"'{k}'" for k in KEYS))


class Last(BaseModel):
    k: str
    qty: int


def _model(name: str, pushdown: bool) -> rv.ReadModel[Last]:
    m = rv.ReadModel(name, row=Last, key="k", where=WHERE if pushdown else None)
    keys = frozenset(KEYS)

    @m.on_topic("orders")
    def _(ev: rv.Envelope[Any]) -> rv.Upsert[Last] | None:
        if not pushdown and ev.aggregate_id not in keys:
            return None
        return rv.Upsert(Last(k=ev.event["k"], qty=ev.event["qty"]))

    return m


def _rows(start: int, n: int) -> pa.Table:
    idx = range(start, start + n)
    return pa.table({"k": [f"o-{j % 100}" for j in idx], "qty": list(idx)}, schema=SCHEMA)


async def _publish(topic: rv.Topic, start: int, rows: int) -> None:
    for i in range(start, start + rows, 5000):
        await topic.publish(_rows(i, min(5000, start + rows - i)))


async def run(rows: int) -> list[tuple[str, float]]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'b.db'}"
        writer = rv.App(store=url)
        topic = writer.topic("orders", schema=SCHEMA, key="k")
        async with writer:
            await _publish(topic, 0, rows)
        for n, pushdown in enumerate((False, True, False, True)):  # interleaved, twice
            label = "where= (pushdown)" if pushdown else "handler filters"
            app = rv.App(store=url)
            app.topic("orders", schema=SCHEMA, key="k")
            view = app.collect(_model(f"last_{n}", pushdown))
            t0 = time.perf_counter()
            async with app:
                await app.settle(timeout=600)
                out.append((f"catch-up, {label}", rows / (time.perf_counter() - t0)))
                got = await view.count()
                assert got == 10, (n, pushdown, got, await view.all(limit=3))
        for n, pushdown in enumerate((False, True, False, True)):
            label = "where= (pushdown)" if pushdown else "handler filters"
            app = rv.App(store=url)
            live = app.topic("orders", schema=SCHEMA, key="k")
            app.collect(_model(f"live_{n}", pushdown))
            async with app:
                await app.settle(timeout=600)
                start = await app.store.head("orders")
                t0 = time.perf_counter()
                await _publish(live, start, rows // 2)
                await app.settle(timeout=600)
                out.append((f"live, {label}", rows // 2 / (time.perf_counter() - t0)))
    return out


def main() -> None:
    rows_main(
        "collector_where",
        "Collector where= pushdown (SQLite file, predicate keeps 10%)",
        "offsets per second",
        run,
        "Topic offsets per second a read model gets through; each variant runs twice, "
        "interleaved. Live includes publishing (append + relay).",
    )


if __name__ == "__main__":
    main()
