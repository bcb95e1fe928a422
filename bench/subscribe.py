"""Subscription reads: events/s of ``Subscriptions.poll`` (predicate pushed into SQL) beside
reading the whole topic as Arrow batches and filtering with the predicate's pyarrow
expression, on one SQLite file. ``python -m bench.subscribe --rows 100000 --out BENCHMARKS.md``
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pyarrow as pa

import reventless as rv
from bench.blocks import rows_main
from reventless.subscribe import Predicate, Subscriptions

SCHEMA = pa.schema([pa.field("k", pa.string()), pa.field("qty", pa.int64())])


async def run(rows: int) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'b.db'}"
        app = rv.App(store=url)
        topic = app.topic("orders", schema=SCHEMA, key="k")
        async with app:
            for i in range(0, rows, 50_000):
                n = min(50_000, rows - i)
                await topic.publish(
                    pa.table(
                        {
                            "k": [f"o-{j % 100}" for j in range(i, i + n)],
                            "qty": list(range(i, i + n)),
                        },
                        schema=SCHEMA,
                    )
                )
            keys = ", ".join(f"'o-{i}'" for i in range(1, 11))
            where = f"key IN ({keys}) AND qty >= 0"  # 10% of the rows
            out = []
            async with Subscriptions(app.store.db) as subs:
                for label, text in (("poll, no predicate", None), ("poll, 10% predicate", where)):
                    sub = await subs.create("orders", where=text)
                    t0, n, cursor = time.perf_counter(), 0, 1
                    while cursor <= rows:
                        page = await subs.poll(sub.id, from_offset=cursor, limit=5000)
                        n += len(page.events)
                        cursor = page.next_offset
                    dt = time.perf_counter() - t0
                    out.append((f"{label}: {n} events delivered", n / dt))
                    out.append((f"{label}: topic offsets scanned", rows / dt))
            p = Predicate.parse(where, topic.schema)
            t0, n = time.perf_counter(), 0
            async for b in topic.read_batches(batch_size=50_000):
                n += b.filter(p.arrow()).num_rows
            dt = time.perf_counter() - t0
            out.append((f"read_batches + Arrow filter: {n} events matched", n / dt))
            out.append(("read_batches + Arrow filter: topic offsets scanned", rows / dt))
        return out


def main() -> None:
    rows_main("subscribe", "Subscriptions (SQLite file)", "per second", run)


if __name__ == "__main__":
    main()
