"""Blue/green read-model table versions: load one in bulk, swap it in, hand it off.

A rebuild (``reventless.spark``) writes its rows into a fresh table version
(``rm_<name>__<hex>``) that no query sees, in a transaction per chunk. The swap is one
write transaction: it locks the live table (SQLite: the write lock; PostgreSQL:
``LOCK TABLE ... ACCESS EXCLUSIVE``), reads the component's checkpoints (``FOR UPDATE``
on PostgreSQL), lets the caller bring the new version up to them when the live collector
got further than the rebuild read (``CatchUp``: the events in between and the version's
rows, inside this transaction), renames the version to ``rm_<name>``, drops the old
table and sets each checkpoint to ``max(checkpoint, rebuild offset)``. The live
collector then continues from that checkpoint on the new table: nothing is applied twice
or missed.

Also here: the log-side reads a rebuild needs besides ``SqlEventStore``'s (a topic's
incarnation, the last offset produced by a time) and where Spark reads a PostgreSQL
store over JDBC.

Example::

    versions = SqlTableVersions(store)               # an opened SqlEventStore
    rows = await versions.load(model, "rm_orders__1a2b", chunks)
    final, applied = await versions.swap(model, "rm_orders__1a2b", upto, catch_up)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import StoreError
from . import tables
from .database import Database, table_name
from .readmodel import RowModel, RowWriter, SqlReadModelTable
from .sql import SqlEventStore

Part = tuple[str, int]
Row = tuple[Any, ...]
#: Partition -> (after, upto): the offsets a catch-up applies (``after < _offset <= upto``).
Spans = Mapping[Part, tuple[int, int]]


class SwapWriter(RowWriter, Protocol):
    """The swap transaction as a catch-up sees it: the new version's rows (``fetch``,
    ``write``) and the log's events, all in that one transaction."""

    def events(
        self, topic: str, partition: int, after: int, upto: int, columns: Sequence[str]
    ) -> list[Row]:
        """``columns`` of ``topic``'s events with ``after < _offset <= upto`` in
        ``partition``, in offset order."""
        ...


#: Applies the events of ``spans`` to the new version; returns how many it applied.
CatchUp = Callable[[SwapWriter, Spans], int]


class TableVersions(Protocol):
    """Versions of a read model's table next to the live one (``rm_<name>``)."""

    async def load(self, model: RowModel[Any], version: str, chunks: Iterable[list[Row]]) -> int:
        """Create table ``version`` of ``model`` and insert the chunks of rows (a
        transaction each); returns the number of rows."""
        ...

    async def drop(self, version: str) -> None:
        """Drop a table version (a failed or abandoned rebuild), if it exists."""
        ...

    async def install(self, version: str, target: str) -> None:
        """Rename ``version`` to ``target``, replacing it (as-of snapshots)."""
        ...

    async def swap(
        self,
        model: RowModel[Any],
        version: str,
        read_upto: Mapping[Part, int],
        catch_up: CatchUp,
    ) -> tuple[dict[Part, int], int]:
        """The swap transaction (see the module docstring): ``read_upto`` is the last
        offset per partition the rebuild read; ``catch_up`` runs (inside the transaction)
        only if a checkpoint is further. Returns the new checkpoints and what
        ``catch_up`` applied."""
        ...


class RebuildLog(Protocol):
    """The log reads of a rebuild that ``SqlEventStore`` does not offer."""

    async def incarnation(self, topic: str) -> str:
        """What tells this topic from an earlier one of the same name (its creation time);
        ``StoreError`` if it does not exist."""
        ...

    async def offset_at(self, topic: str, produced_at_us: int) -> int:
        """The last offset produced at or before ``produced_at_us`` (0: none)."""
        ...


class _SwapTxn:
    """A ``SwapWriter`` on the swap's open transaction."""

    __slots__ = ("conn", "rows", "store")

    def __init__(self, store: SqlEventStore, rows: RowWriter, conn: Connection) -> None:
        self.store, self.rows, self.conn = store, rows, conn

    def fetch(self, keys: Sequence[Any]) -> dict[Any, Any]:
        return self.rows.fetch(keys)

    def write(self, changed: dict[Any, Any]) -> None:
        self.rows.write(changed)

    def events(
        self, topic: str, partition: int, after: int, upto: int, columns: Sequence[str]
    ) -> list[Row]:
        db = self.store.db
        select = (
            f"SELECT {', '.join(db.q(n) for n in columns)} FROM {db.q(self.store.table_of(topic))}"
        )
        sql = f"{select} WHERE _offset > {db.mark} AND _offset <= {db.mark}"
        params: tuple[Any, ...] = (after, upto)
        if self.store.topic(topic).partitions > 1:
            sql += f" AND _partition = {db.mark}"
            params += (partition,)
        return [tuple(r) for r in self.conn.exec_driver_sql(sql + " ORDER BY _offset", params)]


class SqlTableVersions:
    """``TableVersions`` on the SQL store. Takes the event store: a catch-up reads its
    topics' tables inside the swap transaction."""

    def __init__(self, store: SqlEventStore) -> None:
        self.store = store
        self.db = store.db

    async def load(self, model: RowModel[Any], version: str, chunks: Iterable[list[Row]]) -> int:
        db = self.db
        table = SqlReadModelTable(model, db, table=version)
        await db.write(lambda conn: table.sa_table().create(conn))
        cols = ", ".join(db.q(c) for c in table.columns)
        sql = f"INSERT INTO {db.q(version)} ({cols}) VALUES ({db.placeholders(len(table.columns))})"
        count = 0
        for chunk in chunks:
            await db.write(lambda conn, rows=chunk: conn.exec_driver_sql(sql, rows))  # type: ignore[misc]
            count += len(chunk)
        return count

    async def drop(self, version: str) -> None:
        db = self.db
        await db.write(lambda conn: conn.exec_driver_sql(f"DROP TABLE IF EXISTS {db.q(version)}"))

    async def install(self, version: str, target: str) -> None:
        db = self.db

        def work(conn: Connection) -> None:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {db.q(target)}")
            conn.exec_driver_sql(f"ALTER TABLE {db.q(version)} RENAME TO {db.q(target)}")

        await db.write(work)

    async def swap(
        self,
        model: RowModel[Any],
        version: str,
        read_upto: Mapping[Part, int],
        catch_up: CatchUp,
    ) -> tuple[dict[Part, int], int]:
        return await self.db.write(partial(self._swap_sync, model, version, read_upto, catch_up))

    def _swap_sync(
        self,
        model: RowModel[Any],
        version: str,
        read_upto: Mapping[Part, int],
        catch_up: CatchUp,
        conn: Connection,
    ) -> tuple[dict[Part, int], int]:
        db = self.db
        live = table_name("rm_", model.name)
        exists = sa.inspect(conn).has_table(live)
        if exists and not db.is_sqlite:
            conn.exec_driver_sql(f"LOCK TABLE {db.q(live)} IN ACCESS EXCLUSIVE MODE")
        current = self._checkpoints_sync(conn, model.name)
        ahead = {
            part: (upto, current[part])
            for part, upto in read_upto.items()
            if current.get(part, 0) > upto
        }
        new_table = SqlReadModelTable(model, db, table=version)
        applied = (
            catch_up(_SwapTxn(self.store, new_table.writer(conn), conn), ahead) if ahead else 0
        )
        final: dict[Part, int] = {}
        for part, upto in read_upto.items():
            final[part] = max(upto, current.get(part, 0))
            if final[part] != current.get(part):
                self._set_checkpoint_sync(conn, model.name, part, final[part])
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

    def _checkpoints_sync(self, conn: Connection, component: str) -> dict[Part, int]:
        db = self.db
        q = db.q
        sql = (
            f"SELECT topic, {q('partition')}, {q('offset')} FROM rv_checkpoints "
            f"WHERE component = {db.mark}"
        )
        if not db.is_sqlite:
            sql += " FOR UPDATE"
        return {
            (str(t), int(p)): int(o) for t, p, o in conn.exec_driver_sql(sql, (component,)).all()
        }

    def _set_checkpoint_sync(
        self, conn: Connection, component: str, part: Part, offset: int
    ) -> None:
        db = self.db
        q = db.q
        conn.exec_driver_sql(
            f"INSERT INTO rv_checkpoints (component, topic, {q('partition')}, {q('offset')}) "
            f"VALUES ({db.placeholders(4)}) ON CONFLICT (component, topic, {q('partition')}) "
            f"DO UPDATE SET {q('offset')} = excluded.{q('offset')}",
            (component, part[0], part[1], offset),
        )


class SqlRebuildLog:
    """``RebuildLog`` on the SQL store."""

    def __init__(self, store: SqlEventStore) -> None:
        self.store = store
        self.db = store.db

    async def incarnation(self, topic: str) -> str:
        def work(conn: Connection) -> str:
            row = conn.execute(
                sa.select(tables.topics.c.created_at).where(tables.topics.c.name == topic)
            ).first()
            if row is None:
                raise StoreError(f"topic {topic!r} does not exist")
            return str(row[0])

        return await self.db.read(work)

    async def offset_at(self, topic: str, produced_at_us: int) -> int:
        db = self.db
        sql = (
            f"SELECT MAX(_offset) FROM {db.q(self.store.table_of(topic))} "
            f"WHERE _produced_at <= {db.mark}"
        )
        return int(await db.read(lambda c: c.exec_driver_sql(sql, (produced_at_us,)).scalar() or 0))


def jdbc_location(db: Database) -> tuple[str, dict[str, str]]:
    """JDBC URL and connection properties of a ``postgresql+psycopg://`` store.

    A ``search_path`` given in libpq ``options`` becomes ``currentSchema``."""
    url = db.url
    if url.get_backend_name() != "postgresql":
        raise StoreError(f"JDBC reading needs a PostgreSQL store, not {url.drivername!r}")
    query = f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}"
    props = {"driver": "org.postgresql.Driver", "user": url.username or "postgres"}
    if url.password:
        props["password"] = str(url.password)
    options = url.query.get("options")
    for opt in [options] if isinstance(options, str) else list(options or ()):
        for part in opt.split():
            key, _, value = part.removeprefix("-c").partition("=")
            if key == "search_path":
                props["currentSchema"] = value
    return query, props


def jdbc_slice(table: str, columns: Sequence[str], lower: int, upper: int) -> str:
    """The subquery Spark reads over JDBC: ``columns`` of offsets ``lower..upper`` of the
    topic table ``table`` (PostgreSQL)."""
    cols = ", ".join(f'"{n}"' for n in columns)
    return f'(SELECT {cols} FROM "{table}" WHERE _offset BETWEEN {int(lower)} AND {int(upper)}) t'
