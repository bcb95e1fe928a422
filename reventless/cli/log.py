"""``reventless topics``, ``tail`` and ``export``: a store's topics read without the
application's code. The reading commands never create a store.

Example::

    reventless topics --store sqlite:///shop.db --json
    reventless tail Order --store sqlite:///shop.db --follow
    reventless export Order orders.parquet --store sqlite:///shop.db
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .output import Meter, make_table, meter, print_json, stdout
from .params import COUNT, OFFSET
from .run import UsageError, run

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import pyarrow as pa

    from ..store import StoreAdmin, StoreOverview


def open_admin(store: str) -> AbstractAsyncContextManager[StoreAdmin]:
    """``reventless.store.open_admin``, imported when a command opens a store (SQLAlchemy,
    pyarrow: not for ``--help``, a completion or a usage error)."""
    from ..store import open_admin as opened

    return opened(store)


#: Rows per read of ``tail --follow``.
FOLLOW_PAGE = 1000
#: Seconds ``tail --follow`` waits for a change signal before it reads again: another
#: process's commits signal on PostgreSQL (NOTIFY), not on SQLite.
FOLLOW_WAIT = 0.5
DEFAULT_STORE = "sqlite:///reventless.db"

Store = Annotated[str, typer.Option("--store", help="store URL", show_default=True)]
Json = Annotated[bool, typer.Option("--json", help="JSON on stdout, for scripts")]


def overview_json(overview: StoreOverview) -> dict[str, Any]:
    """The overview with stable keys: ``topics`` and ``collectors`` (with ``partitions``)."""
    return {
        "topics": [
            {
                "name": t.name,
                "kind": t.kind,
                "tenant": t.tenant,
                "partitions": t.partitions,
                "head": t.head,
                "table": t.table,
            }
            for t in overview.topics
        ],
        "collectors": [
            {
                "component": c.component,
                "topic": c.topic,
                "checkpoint": c.checkpoint,
                "lag": c.lag,
                "state": "resnapshot_required" if c.resnapshot_required else "ok",
                "partitions": [
                    {"partition": p.partition, "checkpoint": p.checkpoint, "head": p.head,
                     "lag": p.lag}
                    for p in c.partitions
                ],
            }
            for c in overview.collectors
        ],
    }  # fmt: skip


def topics(store: Store = DEFAULT_STORE, as_json: Json = False) -> None:
    """List topics (head offsets) and collectors (checkpoint, lag)."""
    run(_topics(store, as_json))


async def _topics(store: str, as_json: bool) -> None:
    async with open_admin(store) as admin:
        overview = await admin.overview()
    if as_json:
        print_json(overview_json(overview))
        return
    out = stdout()
    out.print(
        make_table(
            "topics",
            ["topic", "kind", "tenant", "partitions", "head", "table"],
            [(t.name, t.kind, t.tenant, t.partitions, t.head, t.table) for t in overview.topics],
        )
    )
    # state: resnapshot_required when retention deleted events past a checkpoint
    out.print(
        make_table(
            "collectors",
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
    )


def tail(
    topic: Annotated[str, typer.Argument(help="the topic's name")],
    store: Store = DEFAULT_STORE,
    from_offset: Annotated[
        int | None,
        typer.Option(
            "--from", parser=OFFSET, help="first offset (default 1; with --follow: after the head)"
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", parser=COUNT, help="default 20")] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="keep printing events as they are committed, until Ctrl-C (exit 0)",
        ),
    ] = False,
) -> None:
    """Print a topic's events as JSON lines."""
    run(_tail(topic, store, from_offset, limit, follow))


async def _tail(
    topic: str, store: str, from_offset: int | None, limit: int | None, follow: bool
) -> None:
    if follow and limit is not None:
        raise UsageError("--limit does not go with --follow (which runs until interrupted)")
    async with open_admin(store) as admin:
        if follow:
            await _follow(admin, topic, from_offset)
            return
        schema, rows = await admin.tail(topic, from_offset or 1, limit or 20)
        rows = await admin.shown(schema, rows)
    print_rows(schema, rows)


def print_rows(schema: pa.Schema, rows: Sequence[Sequence[Any]]) -> None:
    """One JSON object per event: offset, metadata, then ``data`` (the event's fields)."""
    from ..codec import META_NAMES

    names = schema.names
    for row in (dict(zip(names, r, strict=True)) for r in rows):
        meta = {k: v for k, v in row.items() if k in META_NAMES and v is not None}
        data = {k: v for k, v in row.items() if k not in META_NAMES and v is not None}
        print(json.dumps({"offset": meta.pop("_offset"), **meta, "data": data}, default=str))
    sys.stdout.flush()


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM cancel the current task (the command then exits 0)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    stops = (signal.SIGINT, signal.SIGTERM)
    for sig in stops:
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C still interrupts
            loop.add_signal_handler(sig, task.cancel)
    try:
        yield
    finally:
        for sig in stops:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


async def _follow(admin: StoreAdmin, topic: str, from_offset: int | None) -> None:
    """Print ``topic``'s events from ``from_offset`` (default: after the head) as they are
    committed, until SIGINT or SIGTERM."""
    with stopped_by_signals(), contextlib.suppress(asyncio.CancelledError):
        if from_offset is None:
            heads = {t.name: t.head for t in (await admin.overview()).topics}
            from_offset = heads.get(topic, 0) + 1  # tail() names an unknown topic below
        offset = from_offset
        while True:
            seen = admin.changes  # before the read: a commit during it is not slept through
            schema, rows = await admin.tail(topic, offset, FOLLOW_PAGE)
            rows = await admin.shown(schema, rows)
            if rows:
                print_rows(schema, rows)
                offset = int(rows[-1][schema.names.index("_offset")]) + 1
            if len(rows) < FOLLOW_PAGE:
                await admin.wait_for_change(FOLLOW_WAIT, seen)


def export(
    topic: Annotated[str, typer.Argument(help="the topic's name")],
    path: Annotated[str, typer.Argument(help="the Parquet file to write")],
    store: Store = DEFAULT_STORE,
    from_offset: Annotated[int, typer.Option("--from", parser=OFFSET, help="first offset")] = 1,
) -> None:
    """Export a topic to a Parquet file (typed Arrow schema), with progress on stderr."""
    run(_export(topic, path, store, from_offset))


async def _export(topic: str, path: str, store: str, from_offset: int) -> None:
    """Export through the typed Arrow schema stored with the topic, into a temporary file
    beside ``path`` that is renamed when complete (no half-written Parquet file)."""
    target = _export_target(path)
    partial = target.with_name(f".{target.name}.part")
    try:
        async with open_admin(store) as admin:
            heads = {t.name: t.head for t in (await admin.overview()).topics}
            total = max(heads.get(topic, 0) - from_offset + 1, 0)  # offsets are gapless
            with meter(f"export {topic}", total, "rows") as m:
                n = await admin.scan(
                    topic, from_offset, lambda s, pages: _write(topic, partial, s, pages, m)
                )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    print(f"wrote {n} rows to {path}")


def _write(
    topic: str,
    partial: Path,
    schema: pa.Schema,
    pages: Iterator[list[tuple[Any, ...]]],
    m: Meter,
) -> int:
    """Runs on the store's reader thread: each page becomes one Arrow batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..codec import META_NAMES, TopicSchema

    fields = pa.schema([f for f in schema if f.name not in META_NAMES])
    ts = TopicSchema.from_arrow(topic, fields)
    count = 0
    with pq.ParquetWriter(partial, ts.arrow_schema) as writer:
        for rows in pages:
            batch = ts.to_arrow(rows)
            writer.write_batch(batch)
            count += batch.num_rows
            m.advance(batch.num_rows)
    return count


def _export_target(path: str) -> Path:
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{target} is a directory; give the Parquet file's path")
    if not target.parent.is_dir():
        raise UsageError(f"no directory {target.parent} for {target.name}")
    return target
