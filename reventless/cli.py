"""The ``reventless`` command: inspect a store without the application's code.

Example::

    reventless topics --store sqlite:///shop.db
    reventless tail Order --store sqlite:///shop.db --limit 5
    reventless export Order orders.parquet --store sqlite:///shop.db
    reventless dead-letters --store sqlite:///shop.db
    reventless redrive order_confirmations --app examples.shop.cli:app
    reventless rebuild examples.shop.stats:customer_orders --app my.module:app --master local[2]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.engine import Connection

from .codec import META_NAMES
from .collect.deadletter import list_sync
from .errors import ReventlessError
from .store.database import Database


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


async def _with_db(url: str, fn: Any) -> Any:
    db = Database(url)
    await db.open()
    try:
        return await db.read(fn)
    finally:
        await db.close()


def _topics(conn: Connection) -> tuple[list[Any], list[Any]]:
    rows = conn.exec_driver_sql(
        "SELECT name, kind, tenant, partitions, table_name FROM rv_topics ORDER BY name"
    ).all()
    heads: dict[tuple[str, int], int] = {}
    for name, _, _, _, table in rows:
        sql = f'SELECT _partition, MAX(_offset) FROM "{table}" GROUP BY _partition'
        heads.update({(name, int(p)): int(h) for p, h in conn.exec_driver_sql(sql).all()})
    topics = [
        (n, k, t, parts, max((h for (tn, _), h in heads.items() if tn == n), default=0), tb)
        for n, k, t, parts, tb in rows
    ]
    lag: dict[tuple[str, str], list[int]] = {}
    cps = conn.exec_driver_sql(
        'SELECT component, topic, "partition", "offset" FROM rv_checkpoints '
        "ORDER BY component, topic"
    ).all()
    for c, t, p, o in cps:
        entry = lag.setdefault((c, t), [0, 0])
        entry[0] = max(entry[0], int(o))
        entry[1] = max(entry[1], heads.get((t, int(p)), 0) - int(o))
    collectors = [(c, t, cp, behind) for (c, t), (cp, behind) in lag.items()]
    return list(topics), collectors


async def cmd_topics(a: argparse.Namespace) -> int:
    topics, collectors = await _with_db(a.store, _topics)
    _print_table(["topic", "kind", "tenant", "partitions", "head", "table"], topics)
    print()
    _print_table(["collector", "topic", "checkpoint", "lag"], collectors)
    return 0


def _schema_of(conn: Connection, topic: str) -> tuple[str, pa.Schema]:
    row = conn.exec_driver_sql(
        "SELECT table_name, arrow_schema FROM rv_topics WHERE name = ?"
        if conn.dialect.paramstyle == "qmark"
        else "SELECT table_name, arrow_schema FROM rv_topics WHERE name = %s",
        (topic,),
    ).first()
    if row is None:
        raise ReventlessError(f"no topic {topic!r} in this store")
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(row[1])))
    return str(row[0]), schema


async def cmd_tail(a: argparse.Namespace) -> int:
    def work(conn: Connection) -> list[dict[str, Any]]:
        table, schema = _schema_of(conn, a.topic)
        names = schema.names
        cols = ", ".join(f'"{n}"' for n in names)
        sql = f'SELECT {cols} FROM "{table}" WHERE _offset >= {int(a.from_offset)} '
        sql += f"ORDER BY _offset LIMIT {int(a.limit)}"
        return [dict(zip(names, r, strict=True)) for r in conn.exec_driver_sql(sql).all()]

    for row in await _with_db(a.store, work):
        meta = {k: v for k, v in row.items() if k in META_NAMES and v is not None}
        data = {k: v for k, v in row.items() if k not in META_NAMES and v is not None}
        print(json.dumps({"offset": meta.pop("_offset"), **meta, "data": data}, default=str))
    return 0


async def cmd_export(a: argparse.Namespace) -> int:
    """Export through the typed Arrow schema stored with the topic."""

    def work(conn: Connection) -> int:
        table, schema = _schema_of(conn, a.topic)
        cols = ", ".join(f'"{n}"' for n in schema.names)
        sql = f'SELECT {cols} FROM "{table}" WHERE _offset >= {int(a.from_offset)} ORDER BY _offset'
        from .codec import TopicSchema

        ts = TopicSchema.from_arrow(a.topic, _fields_only(schema))
        count = 0
        cur = conn.exec_driver_sql(sql)
        with pq.ParquetWriter(a.path, ts.arrow_schema) as writer:
            while rows := cur.fetchmany(50_000):
                batch = ts.to_arrow([tuple(r) for r in rows])
                writer.write_batch(batch)
                count += batch.num_rows
                print(f"  exported {count} rows", file=sys.stderr, flush=True)
        return count

    n = await _with_db(a.store, work)
    print(f"wrote {n} rows to {a.path}")
    return 0


def _fields_only(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in META_NAMES])


async def cmd_dead_letters(a: argparse.Namespace) -> int:
    db = Database(a.store)
    await db.open()
    try:
        letters = await db.read(lambda c: list_sync(db, c, a.component))
    finally:
        await db.close()
    _print_table(
        ["id", "component", "topic", "offset", "aggregate", "type", "attempts", "error"],
        [
            (
                d.id,
                d.component,
                d.topic,
                d.offset,
                d.aggregate_id,
                d.event_type,
                d.attempts,
                d.error[:60],
            )
            for d in letters
        ],
    )
    return 0


async def cmd_redrive(a: argparse.Namespace) -> int:
    module_name, _, attr = a.app.partition(":")
    obj: Any = getattr(importlib.import_module(module_name), attr or "app")
    app = obj() if callable(obj) and not hasattr(obj, "start") else obj
    async with app:
        report = await app.redrive(a.component, a.aggregate)
    print(f"redriven: {report.redriven}  still parked: {report.still_parked}")
    return 0 if report.still_parked == 0 else 1


def _load(path: str, what: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ReventlessError(f"{what} must be given as module:attribute, got {path!r}")
    return getattr(importlib.import_module(module_name), attr)


async def cmd_rebuild(a: argparse.Namespace) -> int:
    """Rebuild a read model with Spark (needs the extra ``spark``)."""
    from .spark import rebuild

    model = _load(a.read_model, "the read model")
    obj = _load(a.app, "--app")
    app = obj(**({"store": a.store} if a.store else {})) if callable(obj) else obj
    report = await rebuild(
        model,
        app,
        master=a.master,
        as_of=a.as_of,
        source=a.source,
        workdir=a.workdir,
        progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True),
    )
    print(
        f"rebuilt {report.model} ({report.path}): events read {report.events_read}, "
        f"events applied {report.events_applied}, rows written {report.rows}, "
        f"seconds {report.seconds:.1f}, table {report.table}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reventless`` console script."""
    p = argparse.ArgumentParser(prog="reventless", description="Inspect reventless stores.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--store", default="sqlite:///reventless.db", help="store URL")
        return sp

    add("topics", "list topics (head offsets) and collectors (checkpoint, lag)")
    t = add("tail", "print a topic's events as JSON lines")
    t.add_argument("topic")
    t.add_argument("--from", dest="from_offset", type=int, default=1)
    t.add_argument("--limit", type=int, default=20)
    e = add("export", "export a topic to a Parquet file (typed Arrow schema)")
    e.add_argument("topic")
    e.add_argument("path")
    e.add_argument("--from", dest="from_offset", type=int, default=1)
    d = add("dead-letters", "list open dead letters")
    d.add_argument("--component")
    r = sub.add_parser("redrive", help="retry a component's dead letters (needs the app)")
    r.add_argument("component")
    r.add_argument("--app", required=True, help="module:attribute of an App or App factory")
    r.add_argument("--aggregate", default=None)
    b = sub.add_parser("rebuild", help="rebuild a read model from the log with Spark")
    b.add_argument("read_model", help="module:attribute of the ReadModel")
    b.add_argument("--app", required=True, help="module:attribute of an App or App factory")
    b.add_argument("--store", default=None, help="store URL passed to an App factory")
    b.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    b.add_argument("--as-of", dest="as_of", type=int, default=None, help="state at this offset")
    b.add_argument("--source", default="auto", choices=["auto", "parquet", "jdbc"])
    b.add_argument("--workdir", default=None, help="segments and staging files")
    a = p.parse_args(argv)
    handlers = {
        "topics": cmd_topics,
        "tail": cmd_tail,
        "export": cmd_export,
        "dead-letters": cmd_dead_letters,
        "redrive": cmd_redrive,
        "rebuild": cmd_rebuild,
    }
    try:
        return asyncio.run(handlers[a.cmd](a))
    except ReventlessError as exc:
        print(f"reventless: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
