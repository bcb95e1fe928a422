"""The store port: the Protocols the rest of reventless types against.

``EventStore`` is the log itself (topics, appends, reads, heads, change signals);
``Store`` adds the facets that keep everything else a running application persists:
``collectors`` (checkpoints, dead letters, the one-call batch commit with its lease
fence), ``retention`` (policies and horizons), ``leases`` (leased collector groups),
``relay_positions`` (the outbox relay), ``schedules`` (scheduled commands) and
``read_model`` (a read model's table).
``SqlEventStore`` implements ``Store`` on SQLite and PostgreSQL. A new backend
implements these Protocols (and those of ``subscriptions.py``, ``retention.py``,
``swap.py`` and ``admin.py`` for the gateway, the Spark hand-off and the CLI), and nothing
outside ``store/`` changes.

Example::

    async def lag(store: Store, component: str) -> int:
        checkpoints, _ = await store.collectors.load(component)
        heads = await store.partition_heads(sorted({t for t, _ in checkpoints}))
        return sum(heads.get(k, 0) - cp for k, cp in checkpoints.items())
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from ..tags import Query
from ..topicdef import TopicDef
from .append import AppendRequest, AppendResult, CommandRecord, StoredRow
from .collector import CollectorStore
from .keys import Keyring
from .leases import LeaseStore
from .readmodel import ReadModelStore, RowModel
from .relay import RelayPositions
from .retention import RetentionStore
from .schedules import ScheduleStore

Part = tuple[str, int]  # (topic, partition)
#: A loaded aggregate: its snapshot (version, fingerprint, state) if any, and the rows after it.
Loaded = tuple[tuple[int, str, str] | None, list[StoredRow]]


class EventStore(Protocol):
    """Append-only, offset-addressed storage of topics (the source of truth)."""

    #: Heads as far as this process has seen (its own commits and NOTIFYs).
    known_heads: dict[str, int]
    #: Called with every group commit's results (the relay listens).
    commit_listeners: list[Callable[[list[AppendResult]], None]]

    @property
    def changes(self) -> int:
        """Commits signalled so far (see ``wait_for_change``)."""
        ...

    @property
    def dialect(self) -> str:
        """What predicates compile to (``sqlite``, ``postgresql``)."""
        ...

    @property
    def arrow_rows(self) -> bool:
        """Whether pages of every column cost this process less read by ``read_columns``
        (and turned into rows) than by ``read``: so where Arrow pages are read in other
        processes (the store's helpers), not where this process would read them."""
        ...

    async def open(self) -> None:
        """Open the store and create its system tables if missing."""
        ...

    async def close(self) -> None:
        """Wait for queued appends, then close."""
        ...

    async def register(self, topic: TopicDef) -> bool:
        """Create the topic's table atomically; True if it was created now."""
        ...

    async def unregister(self, topic_name: str) -> None:
        """Undo a ``register`` of this process (a failed build)."""
        ...

    def topic(self, name: str) -> TopicDef:
        """A registered topic's definition."""
        ...

    async def append(self, request: AppendRequest) -> AppendResult:
        """Append rows in one transaction; raise ``ConcurrencyError`` on a version clash,
        ``AppendConditionError`` when the request's condition fails."""
        ...

    async def append_many(
        self, requests: Sequence[AppendRequest]
    ) -> list[AppendResult | Exception]:
        """Append the requests together: in one transaction, or a few where they exceed
        the store's group limits; each request lands or fails on its own (its outcome in
        its slot: ``ConcurrencyError``, ``AppendConditionError``, ...)."""
        ...

    async def find_command(self, command_id: str) -> CommandRecord | None:
        """Where the append that carried ``command_id`` landed (committed); None if none."""
        ...

    async def read(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        *,
        upto: int | None = None,
        partition: int | None = None,
    ) -> list[StoredRow]:
        """Rows with ``from_offset <= _offset [<= upto]`` (of one partition) in offset order."""
        ...

    async def read_matching(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        where: Any,
        *,
        upto: int | None = None,
        partition: int | None = None,
    ) -> tuple[list[StoredRow], int]:
        """``read`` of the rows a compiled predicate clause keeps, and the last offset the
        read covered (filtered-out rows still move a checkpoint)."""
        ...

    async def read_query(
        self, topic: str, query: Query, *, after: int = 0, limit: int | None = None
    ) -> list[StoredRow]:
        """Rows matching ``query`` (by type and tag) at positions after ``after``, in offset
        order, at most ``limit`` (read through indexes)."""
        ...

    def stream(
        self, topic: str, from_offset: int, page_size: int, *, upto: int | None = None
    ) -> AsyncIterator[list[StoredRow]]:
        """Pages of a topic from ``from_offset`` (server-side cursors where there are)."""
        ...

    async def read_columns(
        self,
        topic: str,
        from_offset: int,
        limit: int,
        *,
        upto: int | None = None,
        partition: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table | list[StoredRow]:
        """``read``, straight into Arrow where the backend can: an Arrow table of the
        stored columns (storage order; what ``TopicSchema.from_storage`` takes), or of
        ``columns`` only, in that order (``TopicSchema.select_storage``); else the rows
        (every column)."""
        ...

    def stream_columns(
        self,
        topic: str,
        from_offset: int,
        page_size: int,
        *,
        upto: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> AsyncIterator[pa.Table | list[StoredRow]]:
        """``stream`` with pages read straight into Arrow where the backend can: a page is
        either an Arrow table of the stored columns (or of ``columns`` only, as in
        ``read_columns``) or a list of rows (every column)."""
        ...

    async def read_stream(
        self, topic: str, aggregate_id: str, after_version: int
    ) -> list[StoredRow]:
        """One aggregate's rows after ``after_version`` in version order."""
        ...

    async def load(self, topic: str, aggregate_id: str) -> Loaded:
        """An aggregate's snapshot (if any) and the rows after it, in one snapshot read."""
        ...

    async def load_many(self, topic: str, aggregate_ids: Sequence[str]) -> dict[str, Loaded]:
        """``load`` of many aggregates in one snapshot read (a few queries, not one per
        aggregate): every id maps to its snapshot and rows, an unknown id to ``(None, [])``."""
        ...

    async def save_snapshot(
        self, topic: str, aggregate_id: str, version: int, fingerprint: str, state: str
    ) -> None:
        """Keep an aggregate's state at ``version`` (an older snapshot never wins)."""
        ...

    async def head(self, topic: str) -> int:
        """The last assigned (and committed) offset of ``topic``; 0 when empty."""
        ...

    async def heads(self) -> dict[str, int]:
        """Every topic's head."""
        ...

    async def partition_heads(
        self, topics: Sequence[str], *, upto: Mapping[str, int] | None = None
    ) -> dict[Part, int]:
        """The last offset of each (topic, partition) with events."""
        ...

    async def wait_for_change(self, timeout: float, seen: int) -> bool:
        """Wait for a commit after ``changes == seen`` (any process's where the store can
        tell); False on timeout."""
        ...


class Store(EventStore, Protocol):
    """An ``EventStore`` with the state of a running application beside the log."""

    @property
    def collectors(self) -> CollectorStore:
        """Checkpoints, dead letters and the batch commit of collectors."""
        ...

    @property
    def leases(self) -> LeaseStore:
        """The lease table of leased collector groups."""
        ...

    @property
    def retention(self) -> RetentionStore:
        """Retention policies and the horizons collectors check before skipping ahead."""
        ...

    @property
    def relay_positions(self) -> RelayPositions:
        """The outbox relay's position per topic."""
        ...

    @property
    def schedules(self) -> ScheduleStore:
        """Scheduled commands: claims, firings, dead letters."""
        ...

    def read_model(self, model: RowModel[Any]) -> ReadModelStore[Any]:
        """The table of a read model (queries, and the rows its batches write)."""
        ...

    @property
    def keyring(self) -> Keyring:
        """Seals and opens personal fields with the data subjects' keys."""
        ...


__all__ = ["EventStore", "Loaded", "Part", "Store"]
