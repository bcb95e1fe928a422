"""Blue/green read-model tables: load a new version in bulk, swap it in, hand off.

The rebuilt rows go into a fresh table (``rm_<name>__<hex>``) that no query sees. The
swap is one write transaction: it locks the live table (SQLite: the write lock;
PostgreSQL: ``LOCK TABLE ... ACCESS EXCLUSIVE``), reads the component's checkpoints,
brings the new table up to them with the same handlers when the live collector got
further than the rebuild read, renames the new table to ``rm_<name>``, drops the old
one and sets each checkpoint to ``max(checkpoint, rebuild offset)``. The live collector
then continues from that checkpoint on the new table: nothing is applied twice or missed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..codec import META_NAMES
from ..collect.component import ReadModel
from ..store.readmodel import SqlReadModelTable as ReadModelTable
from ..store import tables
from ..store.database import Database, table_name
from ..store.sql import SqlEventStore
from .fold import Folder, TopicPlan, decode, schema_of

Part = tuple[str, int]
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


async def load_version(
    db: Database, model: ReadModel[Any], name: str, chunks: Iterator[list[tuple[Any, ...]]]
) -> int:
    """Create table version ``name`` and insert the rows (a transaction per chunk: the
    version is invisible until swapped in, and appends are not held up for long)."""
    table = ReadModelTable(model, db, table=name)
    await db.write(lambda conn: table.sa_table().create(conn))
    cols = ", ".join(db.q(c) for c in table.columns)
    sql = f"INSERT INTO {db.q(name)} ({cols}) VALUES ({db.placeholders(len(table.columns))})"
    count = 0
    for chunk in chunks:
        await db.write(lambda conn, rows=chunk: conn.exec_driver_sql(sql, rows))  # type: ignore[misc]
        count += len(chunk)
    return count


async def drop_table(db: Database, name: str) -> None:
    """Drop a table version (a failed or abandoned rebuild)."""
    await db.write(lambda conn: conn.exec_driver_sql(f"DROP TABLE IF EXISTS {db.q(name)}"))


def _checkpoints(db: Database, conn: Connection, component: str) -> dict[Part, int]:
    q = db.q
    sql = (
        f"SELECT topic, {q('partition')}, {q('offset')} FROM rv_checkpoints "
        f"WHERE component = {db.mark}"
    )
    if not db.is_sqlite:
        sql += " FOR UPDATE"
    return {(str(t), int(p)): int(o) for t, p, o in conn.exec_driver_sql(sql, (component,)).all()}


def _set_checkpoint(
    db: Database, conn: Connection, component: str, part: Part, offset: int
) -> None:
    q = db.q
    conn.exec_driver_sql(
        f"INSERT INTO rv_checkpoints (component, topic, {q('partition')}, {q('offset')}) "
        f"VALUES ({db.placeholders(4)}) ON CONFLICT (component, topic, {q('partition')}) "
        f"DO UPDATE SET {q('offset')} = excluded.{q('offset')}",
        (component, part[0], part[1], offset),
    )


def _catch_up(
    store: SqlEventStore,
    conn: Connection,
    model: ReadModel[Any],
    table: ReadModelTable[Any],
    plans: Sequence[TopicPlan],
    spans: Mapping[Part, tuple[int, int]],
) -> int:
    """Apply the events the live collector processed after the rebuild's offsets
    (``spans``: partition -> (after, upto)) to the new table, in the collector's order."""
    db, folder = store.db, Folder(model)
    state: dict[Any, Any] = {}
    applied = 0
    for plan in plans:
        schema = schema_of(plan.recipe)
        names = [*META_NAMES, *(c.name for c in schema.columns)]
        select = (
            f"SELECT {', '.join(db.q(n) for n in names)} FROM {db.q(store.table_of(plan.name))}"
        )
        for (topic, part), (after, upto) in sorted(spans.items()):
            if topic != plan.name:
                continue
            sql = f"{select} WHERE _offset > {db.mark} AND _offset <= {db.mark}"
            params: tuple[Any, ...] = (after, upto)
            if store.topic(topic).partitions > 1:
                sql += f" AND _partition = {db.mark}"
                params += (part,)
            for row in conn.exec_driver_sql(sql + " ORDER BY _offset", params).all():
                spec = plan.handler(row[5])
                if spec is None:
                    continue
                ev = decode(schema, topic, tuple(row))
                key = spec.key(ev)
                if key not in state:
                    state.update(table.fetch_sync(conn, [key]))
                    state.setdefault(key, None)
                folder.apply(state, ev, spec)
                applied += 1
    table.write_sync(conn, state)
    return applied


def swap_sync(
    store: SqlEventStore,
    conn: Connection,
    model: ReadModel[Any],
    version: str,
    plans: Sequence[TopicPlan],
    read_upto: Mapping[Part, int],
) -> tuple[dict[Part, int], int]:
    """The swap transaction (see the module docstring). Returns the new checkpoints and
    the number of events applied on top of the rebuild."""
    db = store.db
    live = table_name("rm_", model.name)
    exists = sa.inspect(conn).has_table(live)
    if exists and not db.is_sqlite:
        conn.exec_driver_sql(f"LOCK TABLE {db.q(live)} IN ACCESS EXCLUSIVE MODE")
    current = _checkpoints(db, conn, model.name)
    ahead = {
        part: (upto, current[part])
        for part, upto in read_upto.items()
        if current.get(part, 0) > upto
    }
    new_table = ReadModelTable(model, db, table=version)
    applied = _catch_up(store, conn, model, new_table, plans, ahead) if ahead else 0
    final: dict[Part, int] = {}
    for part, upto in read_upto.items():
        final[part] = max(upto, current.get(part, 0))
        if final[part] != current.get(part):
            _set_checkpoint(db, conn, model.name, part, final[part])
    old = f"{live[:44]}__old_{uuid.uuid4().hex[:8]}"
    if exists:
        conn.exec_driver_sql(f"ALTER TABLE {db.q(live)} RENAME TO {db.q(old)}")
    conn.exec_driver_sql(f"ALTER TABLE {db.q(version)} RENAME TO {db.q(live)}")
    if exists:
        conn.exec_driver_sql(f"DROP TABLE {db.q(old)}")
    fp = new_table.schema.fingerprint
    conn.execute(tables.read_models.delete().where(tables.read_models.c.name == model.name))
    conn.execute(
        tables.read_models.insert().values(name=model.name, table_name=live, fingerprint=fp)
    )
    return final, applied


def replace_sync(conn: Connection, db: Database, version: str, target: str) -> None:
    """Install a table version under ``target`` (as-of snapshots), replacing it."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {db.q(target)}")
    conn.exec_driver_sql(f"ALTER TABLE {db.q(version)} RENAME TO {db.q(target)}")


def arrow_rows(batch: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """SQL rows of an Arrow batch (column order kept)."""
    return list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
