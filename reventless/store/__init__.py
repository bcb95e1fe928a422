"""The store port (the Protocols the rest of reventless types against) and its SQL
implementation (SQLite and PostgreSQL via SQLAlchemy).

The ports: ``EventStore`` (the log) and ``Store`` (the log plus its facets:
``CollectorStore``, ``LeaseStore``, ``RetentionStore``, ``RelayPositions``,
``ScheduleStore`` and a ``ReadModelStore`` per read model); ``SubscriptionStore`` (the
gateway's subscriptions), ``TableVersions`` and ``RebuildLog`` (the Spark hand-off) and
``StoreAdmin`` (the CLI).
``open_store`` and ``open_admin`` build the SQL implementations from a URL; nothing
outside this package names a ``Sql*`` class except where it needs SQL itself (Spark's
JDBC reads, the SQL conformance suite), through ``require_sql``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..errors import StoreError
from .admin import CollectorLag, SqlStoreAdmin, StoreAdmin, StoreOverview, TopicHead
from .append import AppendRequest, AppendResult, StoredRow
from .collector import CollectorStore, Failure, Fence, Progress, SqlCollectorStore
from .database import Database, StoreOptions
from .keys import Keyring, KeyStore, MasterKey, SqlKeyStore
from .leases import Grant, LeaseStore
from .port import EventStore, Loaded, Part, Store
from .readmodel import ReadModelStore, RowModel, RowTable, RowWriter
from .relay import RelayPositions
from .retention import Behind, RetentionStore
from .schedules import ScheduleFailure, ScheduleStore, SqlScheduleStore, StoredSchedule
from .sql import SqlEventStore
from .subscriptions import Subscription, SubscriptionStore
from .swap import RebuildLog, SwapWriter, TableVersions


def open_store(url: str, options: StoreOptions | None = None) -> Store:
    """The store at ``url`` (``sqlite:///…``, ``postgresql://…``), not yet opened."""
    return SqlEventStore(Database(url, options))


def require_sql(store: Store, what: str) -> SqlEventStore:
    """``store`` as the SQL store, for ``what`` that reads SQL tables itself; a
    ``StoreError`` naming ``what`` for any other backend."""
    if not isinstance(store, SqlEventStore):
        raise StoreError(f"{what} needs the SQL store, not {type(store).__name__}")
    return store


@asynccontextmanager
async def open_admin(url: str) -> AsyncIterator[StoreAdmin]:
    """The store at ``url`` as the command-line tool inspects it, open for the block
    (``StoreError`` when there is no reventless store at ``url``)."""
    admin = await SqlStoreAdmin.open(url)
    try:
        yield admin
    finally:
        await admin.close()


__all__ = [
    "AppendRequest",
    "AppendResult",
    "Behind",
    "CollectorLag",
    "CollectorStore",
    "Database",
    "EventStore",
    "Failure",
    "Fence",
    "Grant",
    "KeyStore",
    "Keyring",
    "LeaseStore",
    "Loaded",
    "MasterKey",
    "Part",
    "Progress",
    "ReadModelStore",
    "RebuildLog",
    "RelayPositions",
    "RetentionStore",
    "RowModel",
    "RowTable",
    "RowWriter",
    "ScheduleFailure",
    "ScheduleStore",
    "SqlCollectorStore",
    "SqlEventStore",
    "SqlKeyStore",
    "SqlScheduleStore",
    "Store",
    "StoreAdmin",
    "StoreOptions",
    "StoreOverview",
    "StoredRow",
    "StoredSchedule",
    "Subscription",
    "SubscriptionStore",
    "SwapWriter",
    "TableVersions",
    "TopicHead",
    "open_admin",
    "open_store",
    "require_sql",
]
