"""Opening personal fields in synchronous code that has no store open: Spark executors,
and the swap transaction's catch-up on the driver.

``SyncSqlKeyStore`` is a read-only ``KeyStore`` over ``rv_keys`` with a plain
synchronous SQLAlchemy engine of its own (it never creates or destroys a key);
``SyncKeyring`` runs a ``Keyring``'s few awaits on a private event loop, so the same
keyring code opens the rows (a destroyed key still reads as ``rv.ERASED``).
``key_location`` tells another process where a running store's keys are.

Example::

    url, master = key_location(store.keyring)          # the driver
    ring = SyncKeyring(SyncSqlKeyStore(url, master))
    rows = ring.open_rows(schema, rows)                 # an executor, before decoding
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any, NoReturn

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..codec import TopicSchema
from ..errors import KeyringError, StoreError
from .keys import Keyring, MasterKey, SqlKeyStore, keys_table

__all__ = ["SyncKeyring", "SyncSqlKeyStore", "key_location"]

_CHUNK = 500


def key_location(keyring: Keyring) -> tuple[str, MasterKey]:
    """The URL (password included) of the database holding ``keyring``'s data keys and
    the master key they are wrapped under, for a process that opens them itself.

    ``KeyringError`` for a key store that is not ``rv_keys`` in a database another process
    can reach (a custom ``KeyStore``, an in-memory SQLite store)."""
    store = keyring.store
    if not isinstance(store, SqlKeyStore):
        raise KeyringError(
            f"personal data can be opened outside the App only from the SQL key store "
            f"(rv_keys), not {type(store).__name__}"
        )
    if store.db.is_memory:
        raise KeyringError(
            "personal data in an in-memory SQLite store cannot be opened by another process "
            "(a Spark executor): use a SQLite file or PostgreSQL"
        )
    return store.db.url.render_as_string(hide_password=False), store.master


class SyncSqlKeyStore:
    """``rv_keys`` read synchronously by a process without the store open (read-only:
    creating or destroying keys raises ``KeyringError``).

    The engine is made on first use and kept (one pooled connection) until ``close``."""

    def __init__(self, url: str, master: MasterKey) -> None:
        self.url = url
        self.master = master
        self._engine: Engine | None = None

    def __repr__(self) -> str:
        return "SyncSqlKeyStore(...)"

    def _connect(self) -> Engine:
        if self._engine is None:
            url = sa.make_url(self.url)
            sqlite = url.get_backend_name() == "sqlite"
            args: dict[str, Any] = {"timeout": 60} if sqlite else {}
            self._engine = sa.create_engine(url, connect_args=args, pool_size=1)
        return self._engine

    def read(self, key_ids: Collection[str]) -> dict[str, bytes]:
        """``key id -> data key`` of the ids that exist (destroyed or unknown ids are
        absent); ``StoreError`` when the database cannot be read."""
        ids = sorted(set(key_ids))
        if not ids:
            return {}
        found: list[Any] = []
        try:
            with self._connect().connect() as conn:
                for i in range(0, len(ids), _CHUNK):
                    q = sa.select(keys_table.c.key_id, keys_table.c.wrapped).where(
                        keys_table.c.key_id.in_(ids[i : i + _CHUNK])
                    )
                    found.extend(conn.execute(q))
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"cannot read data keys (rv_keys): {exc}") from exc
        return {str(k): self.master.unwrap(str(k), bytes(w)) for k, w in found}

    async def keys(self, key_ids: Collection[str]) -> dict[str, bytes]:
        return self.read(key_ids)

    async def keys_for(self, subjects: Collection[str]) -> dict[str, tuple[str, bytes]]:
        _read_only()

    async def destroy(self, subject: str) -> int:
        _read_only()

    def close(self) -> None:
        """Close the engine's connections."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def _read_only() -> NoReturn:
    raise KeyringError("this key store only reads data keys (it cannot create or destroy one)")


class SyncKeyring:
    """A ``Keyring`` over a ``SyncSqlKeyStore`` for synchronous code: the keyring's awaits
    run on a private event loop (call it from a thread that runs no loop)."""

    def __init__(self, store: SyncSqlKeyStore) -> None:
        self.store = store
        self.keyring = Keyring(store)
        self._loop = asyncio.new_event_loop()

    def open_rows(self, schema: TopicSchema, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """``Keyring.open_rows``: rows (with their meta columns) with each personal value
        opened, ready to decode; a forgotten subject's values decode as ``rv.ERASED``."""
        if not schema.personal or not rows:
            return rows if isinstance(rows, list) else list(rows)
        return self._loop.run_until_complete(self.keyring.open_rows(schema, rows))

    def open_batch(self, schema: TopicSchema, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``Keyring.open_batch``: the personal columns as text to show (``"[erased]"``
        once forgotten)."""
        if not schema.personal:
            return batch
        return self._loop.run_until_complete(self.keyring.open_batch(schema, batch))

    def close(self) -> None:
        """Close the loop and the key store's connections."""
        self._loop.close()
        self.store.close()
