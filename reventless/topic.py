"""Topics: typed, append-only streams of a store, read as envelopes or Arrow batches,
exported to Parquet, and published to (schema topics). ``EventLog`` (``eventlog.py``) is the
topic of an aggregate.

Example::

    orders = app.topic("orders", schema=schema)   # a schema topic
    async with app:
        await orders.publish(table)
        async for batch in orders.read_batches():
            ...
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from .codec.ipc import parquet_compression
from .decode import envelopes_of, opened, sealed
from .errors import StoreError, TenantError
from .ids import now_us, uuid7_strs
from .spec import Envelope, Metadata
from .store.append import AppendRequest, AppendResult, StoredRow
from .store.port import Store
from .topicdef import TopicDef, partition_of, row_context, stored_rows

_EMPTY_META = Metadata()


class Topic:
    """A typed, append-only stream: read it as envelopes or Arrow batches, export to Parquet.

    Schema topics (declared from an Arrow schema or a pydantic model) are published
    to with ``publish``; aggregate topics are written by their ``EventLog``.
    """

    def __init__(self, definition: TopicDef, *, service: str | None = None) -> None:
        self.definition = definition
        self.name = definition.name
        self.schema = definition.schema
        self.service = service
        self._store: Store | None = None

    def attach(self, store: Store) -> None:
        """Build this topic on ``store`` (the App does it when it starts)."""
        self._store = store

    @property
    def store(self) -> Store:
        """The store this topic is built on (after the App started)."""
        if self._store is None:
            raise StoreError(f"topic {self.name!r} is not built: start the App first")
        return self._store

    @property
    def arrow_schema(self) -> pa.Schema:
        """The topic's Arrow schema (metadata columns first)."""
        return self.schema.arrow_schema

    def check_tenant(self, tenant: str | None) -> str | None:
        """The tenant an append with ``tenant`` writes: a pinned topic's own (also when
        ``tenant`` is None), else ``tenant``; ``TenantError`` for another tenant."""
        pinned = self.definition.tenant
        if pinned is None:
            return tenant
        if tenant is not None and tenant != pinned:
            raise TenantError(f"topic {self.name!r} belongs to tenant {pinned!r}, not {tenant!r}")
        return pinned

    async def head(self) -> int:
        """The last committed offset (0 when empty)."""
        return await self.store.head(self.name)

    async def read(self, from_offset: int = 1, limit: int = 1000) -> list[Envelope[Any]]:
        """Up to ``limit`` envelopes from ``from_offset`` on, in offset order."""
        rows = await self.store.read(self.name, from_offset, limit)
        rows = await opened(self.store, self.schema, rows)
        return envelopes_of(self.schema, self.name, rows)

    async def iter(
        self, from_offset: int = 1, *, page_size: int = 2000
    ) -> AsyncIterator[Envelope[Any]]:
        """Every envelope from ``from_offset`` to the current head, read in pages."""
        async for page in self._pages(from_offset, page_size):
            for ev in envelopes_of(
                self.schema, self.name, await opened(self.store, self.schema, page)
            ):
                yield ev

    async def _pages(
        self, from_offset: int, page_size: int, upto: int | None = None
    ) -> AsyncIterator[list[StoredRow]]:
        async for rows in self.store.stream(self.name, from_offset, page_size, upto=upto):
            yield rows

    async def read_batches(
        self,
        from_offset: int = 1,
        *,
        batch_size: int = 10_000,
        upto: int | None = None,
        sealed: bool = False,
        columns: Sequence[str] | None = None,
    ) -> AsyncIterator[pa.RecordBatch]:
        """The log as typed Arrow record batches (the topic's ``arrow_schema``).

        Personal fields are opened: a string shows as itself, another value as its JSON
        text, a forgotten subject's as ``"[erased]"``; ``sealed=True`` leaves them as
        stored (what exports and segments hold).

        ``columns`` reads only those columns (names of ``arrow_schema``, metadata or
        fields), in that order: the store reads less, the fastest way to scan a few
        columns of a long log. ``SchemaMismatchError`` for an unknown or repeated name,
        before anything is read. (A topic with personal fields reads every column and
        selects after opening them.)

        Example::

            async for batch in orders.read_batches(columns=["_aggregate_id", "total"]):
                ...
        """
        schema = self.schema
        at = () if columns is None else schema.projection(columns)
        wanted = list(columns) if columns is not None and not schema.personal else None
        pages = self.store.stream_columns(
            self.name, from_offset, batch_size, upto=upto, columns=wanted
        )
        async for page in pages:
            if wanted is not None and not isinstance(page, list):
                yield schema.select_storage(page, at)  # only the columns asked were read
                continue
            batch = schema.to_arrow(page) if isinstance(page, list) else schema.from_storage(page)
            if schema.personal and not sealed:
                batch = await self.store.keyring.open_batch(schema, batch)
            yield batch if columns is None else batch.select(list(columns))

    async def export_parquet(
        self, path: str | Path, *, from_offset: int = 1, batch_size: int = 50_000
    ) -> int:
        """Write the log from ``from_offset`` to one Parquet file; returns the row count.

        The file is written beside ``path`` and renamed when complete: a failed export
        leaves no half-written file, and a file already at ``path`` stays as it was. Its
        codec is the topic's ``compression`` (snappy where that is ``"none"``).
        """
        target = Path(path)
        part = target.with_name(f".{target.name}.part")
        count = 0
        try:
            codec = parquet_compression(self.definition.compression)
            with pq.ParquetWriter(str(part), self.arrow_schema, compression=codec) as writer:
                batches = self.read_batches(from_offset, batch_size=batch_size, sealed=True)
                async for batch in batches:
                    writer.write_batch(batch)
                    count += batch.num_rows
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
        return count

    async def publish(
        self,
        data: pa.Table | pa.RecordBatch | Sequence[BaseModel] | Sequence[Mapping[str, Any]],
        *,
        meta: Metadata | None = None,
    ) -> AppendResult:
        """Append rows to a schema topic in one transaction (all or nothing).

        ``data`` is an Arrow table or record batch with exactly the topic's field columns
        (any order, matched by name; the casts that are safe are listed in
        ``TopicSchema.from_arrow_rows``: int32 into int64, large_string or dictionary-encoded
        strings into string, ...), or a list of the topic's model (a model topic; instances
        of exactly that class), or a list of dicts with exactly the field names (an
        Arrow-schema topic). A missing, extra or mistyped column, a null in a NOT NULL
        column or an object of another type raises ``SchemaMismatchError``.

        A topic pinned to a tenant belongs to it: a publish without ``meta.tenant`` is
        stamped with it, another tenant raises ``TenantError``. ``_service`` is
        ``meta.service``, else the App's service. Nothing lands when anything is raised.

        Returns the offsets the rows got, ``first_offset..last_offset`` (offsets start at 1).
        Publishing no rows appends nothing and returns the empty range at the current head:
        ``first_offset == head + 1`` and ``last_offset == head``.

        Example::

            res = await topic.publish(pa.table({"op": ["c"], "ts_ms": [1]}, schema=schema))
            assert res.last_offset - res.first_offset + 1 == 1
        """
        if self.definition.kind == "aggregate":
            raise StoreError(f"{self.name!r} is an aggregate topic: use EventLog.execute/append")
        if self.definition.kind == "dcb":
            raise StoreError(f"{self.name!r} is a DCB log: use DcbLog.append/execute")
        meta = meta or _EMPTY_META
        tenant = self.check_tenant(meta.tenant)
        fields = self.schema.encode_rows(data)
        if not fields:
            head = await self.head()
            return AppendResult(self.name, head + 1, head)
        type_name = next(iter(self.schema.event_types), self.name)
        key = self.definition.key
        key_idx = [c.name for c in self.schema.columns].index(key) if key else None
        keys = [None if key_idx is None or f[key_idx] is None else str(f[key_idx]) for f in fields]
        parts = self.definition.partitions
        context = row_context(meta, self.service, tenant)
        rows = stored_rows(
            now_us(),
            uuid7_strs(len(fields)),
            context,
            (
                (k, None, type_name, 1, partition_of(k, parts), f)
                for k, f in zip(keys, fields, strict=True)
            ),
        )
        rows = await sealed(self.store, self.schema, rows)
        return await self.store.append(AppendRequest(self.name, rows))
