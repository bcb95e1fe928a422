"""The ``reventless`` command: inspect a store without the application's code.

Example::

    reventless topics --store sqlite:///shop.db
    reventless tail Order --store sqlite:///shop.db --limit 5
    reventless export Order orders.parquet --store sqlite:///shop.db
    reventless dead-letters --store sqlite:///shop.db
    reventless redrive order_confirmations --app examples.shop.cli:app
    reventless serve --store sqlite:///shop.db --tokens-file tokens.json --port 8000
    reventless rebuild examples.shop.stats:customer_orders --app my.module:app --master local[2]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .codec import META_NAMES
from .errors import ReventlessError
from .store import open_admin


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


async def cmd_topics(a: argparse.Namespace) -> int:
    async with open_admin(a.store) as admin:
        overview = await admin.overview()
    _print_table(
        ["topic", "kind", "tenant", "partitions", "head", "table"],
        [(t.name, t.kind, t.tenant, t.partitions, t.head, t.table) for t in overview.topics],
    )
    print()
    # state: resnapshot_required when retention deleted events past a checkpoint
    _print_table(
        ["collector", "topic", "checkpoint", "lag", "state"],
        [
            (
                c.component,
                c.topic,
                c.checkpoint,
                c.lag,
                "resnapshot_required" if c.resnapshot_required else "ok",
            )
            for c in overview.collectors
        ],
    )
    return 0


async def cmd_tail(a: argparse.Namespace) -> int:
    async with open_admin(a.store) as admin:
        schema, rows = await admin.tail(a.topic, a.from_offset, a.limit)
    names = schema.names
    for row in (dict(zip(names, r, strict=True)) for r in rows):
        meta = {k: v for k, v in row.items() if k in META_NAMES and v is not None}
        data = {k: v for k, v in row.items() if k not in META_NAMES and v is not None}
        print(json.dumps({"offset": meta.pop("_offset"), **meta, "data": data}, default=str))
    return 0


async def cmd_export(a: argparse.Namespace) -> int:
    """Export through the typed Arrow schema stored with the topic."""

    def write(schema: pa.Schema, pages: Iterator[list[tuple[Any, ...]]]) -> int:
        from .codec import TopicSchema

        ts = TopicSchema.from_arrow(a.topic, _fields_only(schema))
        count = 0
        with pq.ParquetWriter(a.path, ts.arrow_schema) as writer:
            for rows in pages:
                batch = ts.to_arrow(rows)
                writer.write_batch(batch)
                count += batch.num_rows
                print(f"  exported {count} rows", file=sys.stderr, flush=True)
        return count

    async with open_admin(a.store) as admin:
        n = await admin.scan(a.topic, a.from_offset, write)
    print(f"wrote {n} rows to {a.path}")
    return 0


def _fields_only(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in META_NAMES])


async def cmd_dead_letters(a: argparse.Namespace) -> int:
    async with open_admin(a.store) as admin:
        letters = await admin.collectors.dead_letters(a.component)
        names = await admin.components()
    if a.broker:  # the broker's dead-letter queues too (adapters that have them)
        letters.extend(
            await _broker_dead_letters(a.broker, [a.component] if a.component else names)
        )
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


async def _broker_dead_letters(url: str, groups: list[str]) -> list[Any]:
    from .broker import DeadLetterQueues, open_broker

    broker = open_broker(url)
    if not isinstance(broker, DeadLetterQueues):
        raise ReventlessError(f"broker {url.split('://')[0]} has no dead-letter queues to list")
    await broker.connect()
    try:
        found: list[Any] = []
        for group in groups:
            found.extend(await broker.dead_letters(group))
        return found
    finally:
        await broker.close()


def _load_app(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    obj: Any = getattr(importlib.import_module(module_name), attr or "app")
    return obj() if callable(obj) and not hasattr(obj, "start") else obj


async def cmd_infra(a: argparse.Namespace) -> int:
    """Write the infrastructure derived from the app's declarations (no I/O but files)."""
    from .synth import synth

    written = synth(
        _load_app(a.app),
        a.out,
        aws_url=None if a.aws_url == "none" else a.aws_url,
        nats_url=None if a.nats_url == "none" else a.nats_url,
        dialects=tuple(d for d in a.dialect.split(",") if d),
    )
    for path in written:
        print(f"wrote {path}")
    return 0


async def cmd_redrive(a: argparse.Namespace) -> int:
    app = _load_app(a.app)
    async with app:
        report = await app.redrive(a.component, a.aggregate)
    print(f"redriven: {report.redriven}  still parked: {report.still_parked}")
    return 0 if report.still_parked == 0 else 1


def _tokens(path: str) -> dict[str, str | None]:
    with open(path, encoding="utf-8") as f:
        tokens = json.load(f)
    if not isinstance(tokens, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in tokens.items()
    ):
        raise ReventlessError(f"{path}: expected a JSON object {{token: tenant or null}}")
    return tokens


async def cmd_serve(a: argparse.Namespace) -> int:
    """Run the HTTP/SSE gateway (extra ``serve``) with uvicorn."""
    import uvicorn

    from .gateway import GatewayOptions, create_app

    app = create_app(
        a.store,
        tokens=_tokens(a.tokens_file),
        options=GatewayOptions(retention_interval=a.retention_interval),
    )
    await uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port)).serve()
    return 0


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
    d.add_argument("--broker", default=None, help="also list this broker's dead-letter queues")
    r = sub.add_parser("redrive", help="retry a component's dead letters (needs the app)")
    r.add_argument("component")
    r.add_argument("--app", required=True, help="module:attribute of an App or App factory")
    r.add_argument("--aggregate", default=None)
    s = add("serve", "run the HTTP/SSE subscription gateway (extra 'serve')")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--tokens-file", required=True, help="JSON {token: tenant or null}")
    s.add_argument("--retention-interval", type=float, default=None, help="seconds")
    inf = sub.add_parser("infra", help="infrastructure derived from the app's specs")
    isub = inf.add_subparsers(dest="infra_cmd", required=True)
    syn = isub.add_parser(
        "synth", help="write a CloudFormation template, JetStream definitions and SQL DDL"
    )
    syn.add_argument("--app", required=True, help="module:attribute of an App or App factory")
    syn.add_argument("--out", default="infra/generated", help="output directory")
    syn.add_argument("--aws-url", default="sns+sqs://us-east-1", help="names ('none': skip)")
    syn.add_argument("--nats-url", default="nats://127.0.0.1:4222", help="names ('none': skip)")
    syn.add_argument("--dialect", default="sqlite,postgresql", help="SQL dialects of the DDL")
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
        "serve": cmd_serve,
        "infra": cmd_infra,
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
