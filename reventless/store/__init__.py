"""The EventStore port and its SQL implementation (SQLite and PostgreSQL via SQLAlchemy)."""

from __future__ import annotations

from typing import Protocol

from ..topic import TopicDef
from .append import AppendRequest, AppendResult, StoredRow
from .database import Database, StoreOptions
from .sql import SqlEventStore


class EventStore(Protocol):
    """Append-only, offset-addressed storage of topics (the source of truth)."""

    async def register(self, topic: TopicDef) -> bool:
        """Create the topic's table atomically; True if it was created now."""
        ...

    async def append(self, request: AppendRequest) -> AppendResult:
        """Append rows in one transaction; raise ``ConcurrencyError`` on a version clash."""
        ...

    async def read(
        self, topic: str, from_offset: int, limit: int, *, upto: int | None = None
    ) -> list[StoredRow]:
        """Rows with ``from_offset <= _offset [<= upto]`` in offset order."""
        ...

    async def read_stream(
        self, topic: str, aggregate_id: str, after_version: int
    ) -> list[StoredRow]:
        """One aggregate's rows after ``after_version`` in version order."""
        ...

    async def head(self, topic: str) -> int:
        """The last assigned (and committed) offset of ``topic``; 0 when empty."""
        ...


__all__ = [
    "AppendRequest",
    "AppendResult",
    "Database",
    "EventStore",
    "SqlEventStore",
    "StoreOptions",
    "StoredRow",
]
