"""SQL storage of read models: DDL, batched upserts/deletes and queries.

A read model is a keyed table of pydantic rows (``rm_<name>``). Its collector writes a
batch's final rows inside the transaction that also moves its checkpoint (see
``collector.py``): handlers read the current rows and write the changed ones through a
``RowWriter`` bound to that transaction, so nothing outside ``store/`` holds a
connection.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.engine import Connection

from ..codec import TopicSchema
from ..errors import SpecError
from . import tables
from .database import Database, table_name
from .ddl import KIND_TYPES

R = TypeVar("R", bound=BaseModel)
R_co = TypeVar("R_co", bound=BaseModel, covariant=True)
log = logging.getLogger("reventless.collect")
_CHUNK = 500


class RowModel(Protocol[R_co]):
    """What a read-model table needs of its declaration (``rv.ReadModel`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def row(self) -> type[R_co]: ...

    @property
    def key(self) -> str: ...


class RowWriter(Protocol):
    """A read model's rows inside one store transaction (handed to collector batches)."""

    def fetch(self, keys: Sequence[Any]) -> dict[Any, Any]:
        """The current rows of ``keys`` (missing keys are left out)."""
        ...

    def write(self, changed: dict[Any, Any]) -> None:
        """Upsert each changed key's final row; delete the keys mapped to ``None``."""
        ...


class RowTable(Protocol):
    """A read model's table as a batch commit writes it (``SqlReadModelTable``)."""

    def writer(self, conn: Any) -> RowWriter:
        """Its rows inside the commit's transaction (``conn`` is the store's own)."""
        ...


class ReadModelStore(RowTable, Protocol[R]):
    """A read model's table: created at start, written by its collector's batch commits
    (``RowTable``), queried by ``Projection``."""

    @property
    def model(self) -> RowModel[R]:
        """The read model the table holds."""
        ...

    async def create(self) -> bool:
        """Create the table if it is missing; True if it was created now."""
        ...

    def key_of(self, row: BaseModel) -> Any:
        """The key of ``row``; ``SpecError`` if it is not the model's row type."""
        ...

    async def get(self, key: Any) -> R | None:
        """The row with ``key``, or None."""
        ...

    async def find(self, *, limit: int | None = None, **equals: Any) -> list[R]:
        """Rows whose columns equal the given values, ordered by key."""
        ...

    async def all(self, *, limit: int | None = None) -> list[R]:
        """Every row, ordered by key."""
        ...

    async def count(self) -> int:
        """Number of rows."""
        ...

    async def write_erasing(self, changed: dict[Any, R | None]) -> None:
        """Upsert rows / delete keys (``None``) in one transaction, overwriting the bytes
        the old rows held."""
        ...


def read_model_table(model: RowModel[Any], name: str | None = None) -> sa.Table:
    """The table of read model ``model`` as SQLAlchemy metadata: its row's columns, keyed
    by ``model.key``; named ``name`` (another version) or ``rm_<name>``."""
    schema = TopicSchema.from_model(model.name, model.row, personal=False)
    return sa.Table(
        name or table_name("rm_", model.name),
        sa.MetaData(),
        *(
            sa.Column(
                c.name,
                KIND_TYPES[c.sql_kind](),
                primary_key=c.name == model.key,
                nullable=c.nullable or c.name == model.key,
                autoincrement=False,
            )
            for c in schema.columns
        ),
    )


class _BoundWriter:
    """A ``RowWriter`` on one open transaction."""

    __slots__ = ("conn", "table")

    def __init__(self, table: SqlReadModelTable[Any], conn: Connection) -> None:
        self.table, self.conn = table, conn

    def fetch(self, keys: Sequence[Any]) -> dict[Any, Any]:
        return self.table.fetch_sync(self.conn, keys)

    def write(self, changed: dict[Any, Any]) -> None:
        self.table.write_sync(self.conn, changed)


class SqlReadModelTable(Generic[R]):
    """The SQL table of one read model (``rm_<name>``) and its queries.

    Example::

        view = app.collect(directory)
        ada = await view.get("c-1")
        movers = await view.find(address="1 Main St")
    """

    def __init__(self, model: RowModel[R], db: Database, *, table: str | None = None) -> None:
        """``table`` names another version of the table (Spark rebuilds write a new
        version and swap it in); default ``rm_<name>``."""
        self.model = model
        self.db = db
        self.schema = TopicSchema.from_model(model.name, model.row, personal=False)
        self.table = table or table_name("rm_", model.name)
        self.columns = [c.name for c in self.schema.columns]
        self.key_index = self.columns.index(model.key)
        self._encode = self.schema.encoder(model.row.__name__)
        q = db.q
        cols = ", ".join(q(c) for c in self.columns)
        updates = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in self.columns if c != model.key)
        conflict = "DO NOTHING" if not updates else f"DO UPDATE SET {updates}"
        self.upsert_sql = (
            f"INSERT INTO {q(self.table)} ({cols}) VALUES ({db.placeholders(len(self.columns))}) "
            f"ON CONFLICT ({q(model.key)}) {conflict}"
        )
        self.delete_sql = f"DELETE FROM {q(self.table)} WHERE {q(model.key)} = {db.mark}"
        self.select_sql = f"SELECT {cols} FROM {q(self.table)}"

    def writer(self, conn: Connection) -> RowWriter:
        """This table's rows inside the transaction of ``conn`` (store-internal)."""
        return _BoundWriter(self, conn)

    async def create(self) -> bool:
        """``create_sync`` in its own transaction (DDL serialised across processes)."""
        return await self.db.write(self.create_sync)

    def sa_table(self) -> sa.Table:
        """The table as SQLAlchemy metadata (for DDL of this or another version)."""
        return read_model_table(self.model, self.table)

    def create_sync(self, conn: Connection) -> bool:
        """Create the table; if the row schema changed, drop it and reset the checkpoints.

        Returns True when the model starts empty (new or reset).
        """
        self.db.serialize_ddl(conn)
        fp = self.schema.fingerprint
        row = conn.execute(
            sa.select(tables.read_models).where(tables.read_models.c.name == self.model.name)
        ).first()
        if row is not None and row.fingerprint == fp:
            return False
        if row is not None:
            log.warning("read model %s changed shape: rebuilding from the log", self.model.name)
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.db.q(row.table_name)}")
            conn.execute(tables.read_models.delete().where(tables.read_models.c.name == row.name))
            conn.execute(
                tables.checkpoints.delete().where(tables.checkpoints.c.component == self.model.name)
            )
        self.sa_table().create(conn, checkfirst=True)
        conn.execute(
            tables.read_models.insert().values(
                name=self.model.name, table_name=self.table, fingerprint=fp
            )
        )
        return True

    # -- batch writing (inside the collector's transaction) --------------------------------

    def fetch_sync(self, conn: Connection, keys: Sequence[Any]) -> dict[Any, R]:
        """Current rows for ``keys``."""
        found: dict[Any, R] = {}
        keys = list(keys)
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            sql = (
                f"{self.select_sql} WHERE {self.db.q(self.model.key)} IN "
                f"({self.db.placeholders(len(chunk))})"
            )
            for values in conn.exec_driver_sql(sql, tuple(chunk)).all():
                row = self._decode(values)
                found[getattr(row, self.model.key)] = row
        return found

    def _decode(self, values: Sequence[Any]) -> R:
        decoded: R = self.schema.decode(self.model.row.__name__, values)
        return decoded

    def write_sync(self, conn: Connection, changed: dict[Any, R | None]) -> None:
        """Apply the final state of each changed key: upsert rows, delete ``None``s."""
        ups = [self._encode(r) for r in changed.values() if r is not None]
        dels = [(k,) for k, r in changed.items() if r is None]
        if ups:
            conn.exec_driver_sql(self.upsert_sql, ups)
        if dels:
            conn.exec_driver_sql(self.delete_sql, dels)

    async def write_erasing(self, changed: dict[Any, R | None]) -> None:
        """Apply ``changed`` (as ``write_sync``) in its own transaction, overwriting the
        old rows' bytes (SQLite ``secure_delete``) so no copy of what they held is left in
        free pages; the caller purges old copies (``Keyring.purge``)."""
        sqlite = self.db.is_sqlite

        def run(conn: Connection) -> None:
            if sqlite:
                conn.exec_driver_sql("PRAGMA secure_delete = ON")
            try:
                self.write_sync(conn, changed)
            finally:
                if sqlite:
                    conn.exec_driver_sql("PRAGMA secure_delete = OFF")

        if changed:
            await self.db.write(run)

    def key_of(self, row: BaseModel) -> Any:
        """The key of a row, checking it is this model's row type."""
        if not isinstance(row, self.model.row):
            raise SpecError(
                f"{self.model.name}: Upsert of {type(row).__name__}, "
                f"expected {self.model.row.__name__}"
            )
        return getattr(row, self.model.key)

    # -- queries ---------------------------------------------------------------------------

    async def get(self, key: Any) -> R | None:
        """The row with ``key``, or None."""
        rows = await self.db.read(lambda conn: self.fetch_sync(conn, [key]))
        return rows.get(key)

    async def find(self, *, limit: int | None = None, **equals: Any) -> list[R]:
        """Rows whose columns equal the given values (bound parameters), ordered by key."""
        for name in equals:
            if name not in self.columns:
                raise SpecError(f"{self.model.name}: no column {name!r}")
        where = " AND ".join(f"{self.db.q(n)} = {self.db.mark}" for n in equals)
        sql = self.select_sql + (f" WHERE {where}" if where else "")
        sql += f" ORDER BY {self.db.q(self.model.key)}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        params = tuple(equals.values())
        rows = await self.db.read(lambda conn: conn.exec_driver_sql(sql, params).all())
        return [self._decode(r) for r in rows]

    async def all(self, *, limit: int | None = None) -> list[R]:
        """Every row, ordered by key."""
        return await self.find(limit=limit)

    async def count(self) -> int:
        """Number of rows."""
        sql = f"SELECT COUNT(*) FROM {self.db.q(self.table)}"
        return int(await self.db.read(lambda conn: conn.exec_driver_sql(sql).scalar_one()))
