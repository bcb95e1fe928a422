"""``Subscriptions``: durable, id-addressed subscriptions to a topic, stored in SQL.

A subscription has a topic, an optional predicate, projection and event-type filter, the
tenant it is scoped to (it never sees another tenant's events), a state (``active``,
``paused``, ``closed``) and an acked offset. ``poll`` reads from an offset (default: the
ack + 1) with the predicate pushed down into the SQL read; ``ack`` persists the cursor, so
a later poll (also after a restart) resumes there. Consumer groups (several workers
sharing a subscription by partition, with leases) are in ``group.py``; retention in
``retention.py``.

Example::

    subs = Subscriptions.from_url("sqlite:///shop.db")
    async with subs:
        sub = await subs.create("orders", where="total > 100")
        page = await subs.poll(sub.id, limit=100)
        await subs.ack(sub.id, page.next_offset - 1)
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from ..codec import OFFSET_AT
from ..errors import (
    BadRequestError,
    TopicNotFoundError,
)
from ..predicate import Predicate
from ..store.catalog import EventFilter
from ..store.database import Database
from ..store.keys import Keyring, SqlKeyStore
from ..store.subscriptions import (
    SqlSubscriptionStore,
    State,
    Subscription,
    SubscriptionStore,
)
from .catalog import TopicInfo, events_of, topic_infos
from .group import Member
from .page import Page

__all__ = ["ADMIN", "Page", "State", "Status", "Subscription", "Subscriptions"]


#: The scope of a caller: a tenant, or ``ADMIN`` (every tenant; the in-process default).
ADMIN: None = None
#: The largest offset the store holds (a signed 64-bit BIGINT).
MAX_OFFSET = 2**63 - 1


def _is_offset(v: object, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= MAX_OFFSET


@dataclass(frozen=True, slots=True)
class Status:
    """A subscription's state and backlog: ``lag`` = head - acked; ``horizon`` is the last
    offset retention deleted; ``resnapshot_distance`` = acked - horizon, the offsets
    retention may still delete before this cursor needs a resnapshot (None: no retention
    on the topic)."""

    subscription: Subscription
    head: int
    lag: int
    horizon: int
    resnapshot_distance: int | None
    resnapshot_required: bool
    partitions: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The JSON body the gateway returns."""
        s = self.subscription
        return {
            "id": s.id,
            "topic": s.topic,
            "where": s.predicate,
            "columns": None if s.columns is None else list(s.columns),
            "types": None if s.types is None else list(s.types),
            "tenant": s.tenant,
            "state": s.state,
            "acked": s.acked,
            "head": self.head,
            "lag": self.lag,
            "horizon": self.horizon,
            "resnapshot_distance": self.resnapshot_distance,
            "resnapshot_required": self.resnapshot_required,
            "partitions": self.partitions,
        }


class Subscriptions:
    """Durable subscriptions on one store (see the module docstring).

    ``tenant`` arguments scope a call: a subscription of another tenant is reported as
    unknown and nothing changes; ``ADMIN`` (None) reaches every subscription.
    """

    def __init__(self, db: Database, *, max_limit: int = 10_000, owns_db: bool = False) -> None:
        self.db = db
        #: The store port every read and write goes through.
        self.store: SubscriptionStore = SqlSubscriptionStore(db)
        self.max_limit = max_limit
        self._owns_db = owns_db
        self._topics: dict[str, TopicInfo] = {}
        self._predicates: dict[tuple[str, str], Predicate] = {}
        #: Opens personal fields (built on first use: the master key is in the environment).
        self.keyring: Keyring | None = None

    @classmethod
    def from_url(cls, url: str, *, max_limit: int = 10_000) -> Subscriptions:
        """Subscriptions on the store at ``url`` (opens and closes its own connections)."""
        return cls(Database(url), max_limit=max_limit, owns_db=True)

    async def open(self) -> None:
        """Open the database (if owned) and create the subscription tables."""
        if self._owns_db:
            await self.db.open()
        await self.store.create_tables()

    async def shutdown(self) -> None:
        """Close the database if this object opened it."""
        if self._owns_db:
            await self.db.close()

    async def __aenter__(self) -> Subscriptions:
        await self.open()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()

    # -- topics and predicates -------------------------------------------------------------

    async def topic(self, name: str, tenant: str | None = ADMIN) -> TopicInfo:
        """The stored topic ``name`` (reloaded from the store when unknown)."""
        info = self._topics.get(name)
        if info is None:
            self._topics = topic_infos(await self.store.topics())
            info = self._topics.get(name)
        if info is None or (tenant is not None and info.tenant not in (None, tenant)):
            raise TopicNotFoundError(f"no topic {name!r}")
        return info

    async def topics(self) -> dict[str, TopicInfo]:
        """Every topic of the store, read now."""
        return topic_infos(await self.store.topics())

    def predicate(self, info: TopicInfo, text: str) -> Predicate:
        """The parsed predicate (cached per topic and text)."""
        key = (info.name, text)
        p = self._predicates.get(key)
        if p is None:
            p = self._predicates[key] = Predicate.parse(text, info.schema)
        return p

    def where(self, info: TopicInfo, sub: Subscription) -> EventFilter:
        """A subscription's filter for store reads: the predicate compiled to SQL for this
        store's dialect, the event types and the tenant."""
        clause = None
        if sub.predicate:
            dialect = "sqlite" if self.db.is_sqlite else "postgresql"
            clause = self.predicate(info, sub.predicate).sql(dialect)
        return EventFilter(clause, sub.types, sub.tenant)

    # -- lifecycle -------------------------------------------------------------------------

    async def create(
        self,
        topic: str,
        *,
        where: str | None = None,
        columns: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
        tenant: str | None = ADMIN,
        from_offset: int | Literal["latest"] = 1,
        id: str | None = None,
    ) -> Subscription:
        """Create a subscription (validating everything first: a bad predicate, column or
        offset raises and stores nothing). ``from_offset="latest"`` starts after the head."""
        info = await self.topic(topic, tenant)
        if where is not None:
            self.predicate(info, where)
        self.check_columns(info, columns)
        if types is not None and (not types or not all(isinstance(t, str) for t in types)):
            raise BadRequestError("types must be a non-empty list of event type names")
        if from_offset != "latest" and not _is_offset(from_offset, 1):
            raise BadRequestError(
                f"from_offset must be 1..{MAX_OFFSET} or 'latest', got {from_offset!r}"
            )
        sub_id = id or uuid.uuid4().hex
        if len(sub_id) > 64:
            raise BadRequestError("subscription ids have at most 64 characters")
        return await self.store.create(
            info,
            sub_id,
            where=where,
            columns=columns,
            types=types,
            tenant=tenant,
            from_offset=from_offset,
        )

    async def get(self, sub_id: str, *, tenant: str | None = ADMIN) -> Subscription:
        """The subscription ``sub_id`` (``SubscriptionNotFoundError`` if unknown/closed)."""
        return await self.store.get(sub_id, tenant)

    async def list(self, *, tenant: str | None = ADMIN) -> list[Subscription]:
        """Open subscriptions (of one tenant, or all for ``ADMIN``)."""
        return await self.store.list(tenant)

    async def _set_state(self, sub_id: str, state: State, tenant: str | None) -> Subscription:
        return await self.store.set_state(sub_id, state, tenant)

    async def pause(self, sub_id: str, *, tenant: str | None = ADMIN) -> Subscription:
        """Stop delivering (polls return no events; lag is still reported)."""
        return await self._set_state(sub_id, "paused", tenant)

    async def resume(self, sub_id: str, *, tenant: str | None = ADMIN) -> Subscription:
        """Deliver again after ``pause``."""
        return await self._set_state(sub_id, "active", tenant)

    async def close(self, sub_id: str, *, tenant: str | None = ADMIN) -> Subscription:
        """Close for good (the id becomes unknown; group leases are dropped)."""
        return await self._set_state(sub_id, "closed", tenant)

    def member(
        self, sub_id: str, worker: str, *, ttl: float = 10.0, tenant: str | None = ADMIN
    ) -> Member:
        """A worker of ``sub_id``'s consumer group (leases per partition; ``group.py``)."""
        return Member(self, sub_id, worker, ttl=ttl, tenant=tenant)

    # -- reading and acking ----------------------------------------------------------------

    def check_columns(self, info: TopicInfo, columns: Sequence[str] | None) -> None:
        """Raise ``BadRequestError`` unless ``columns`` (a projection) are known names."""
        if columns is None:
            return
        unknown = sorted(set(columns) - set(info.event_columns))
        if unknown or not columns:
            raise BadRequestError(
                f"unknown columns {unknown} (known: {', '.join(info.event_columns)})"
                if unknown
                else "columns must list at least one column"
            )

    def check_limit(self, limit: int) -> None:
        """Raise ``BadRequestError`` unless ``1 <= limit <= max_limit``."""
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= self.max_limit
        ):
            raise BadRequestError(f"limit must be 1..{self.max_limit}, got {limit!r}")

    async def poll(
        self,
        sub_id: str,
        *,
        from_offset: int | None = None,
        limit: int = 100,
        tenant: str | None = ADMIN,
        columns: Sequence[str] | None = None,
        types: Sequence[str] | None = None,
    ) -> Page:
        """Up to ``limit`` matching events from ``from_offset`` (default: acked + 1).

        ``columns``/``types`` narrow this read (a projection, event types) further.
        Raises ``ResnapshotRequiredError`` when retention deleted events the cursor needs.
        """
        self.check_limit(limit)
        if from_offset is not None and not _is_offset(from_offset, 1):
            raise BadRequestError(f"from must be 1..{MAX_OFFSET}, got {from_offset!r}")
        sub = await self.get(sub_id, tenant=tenant)
        info = await self.topic(sub.topic)
        self.check_columns(info, columns)
        if columns is not None:
            sub = Subscription(**{**_fields(sub), "columns": tuple(columns)})
        if types is not None:
            narrowed = set(types) if sub.types is None else set(types) & set(sub.types)
            sub = Subscription(**{**_fields(sub), "types": tuple(sorted(narrowed)) or ("",)})
        start = sub.acked + 1 if from_offset is None else from_offset
        where = self.where(info, sub)
        got = await self.store.read(info, start, where, limit, rows=sub.state != "paused")
        head, rows = got.head, got.rows
        lag = max(0, head - sub.acked)
        if sub.state == "paused":
            return Page([], start, head, lag, "paused")
        nxt = rows[-1][OFFSET_AT] + 1 if len(rows) == limit else max(start, head + 1)
        shown = await self.shown(info, rows)
        return Page(events_of(info, shown, sub.columns), nxt, head, lag, sub.state)

    async def shown(
        self, info: TopicInfo, rows: Sequence[tuple[Any, ...]]
    ) -> Sequence[tuple[Any, ...]]:
        """``rows`` with personal fields as subscribers see them: opened (a string as
        itself, another value as its JSON text), ``"[erased]"`` once forgotten."""
        if not info.schema.personal or not rows:
            return rows
        if self.keyring is None:
            self.keyring = Keyring(SqlKeyStore(self.db))
        return await self.keyring.shown_rows(info.schema, rows)

    async def ack(self, sub_id: str, offset: int, *, tenant: str | None = ADMIN) -> int:
        """Persist that everything up to ``offset`` is processed; returns the acked offset
        (an older ack changes nothing). Beyond the head: ``AckBeyondHeadError``."""
        return await self._move(sub_id, offset, tenant, seek=False)

    async def seek(self, sub_id: str, offset: int, *, tenant: str | None = ADMIN) -> int:
        """Move the cursor to ``offset`` (its acked offset) in either direction, e.g. to
        the retained horizon after rebuilding from a snapshot."""
        return await self._move(sub_id, offset, tenant, seek=True)

    async def _move(self, sub_id: str, offset: int, tenant: str | None, *, seek: bool) -> int:
        if not _is_offset(offset, 0):
            raise BadRequestError(f"offset must be an integer 0..{MAX_OFFSET}, got {offset!r}")
        await self.topic((await self.get(sub_id, tenant=tenant)).topic)
        return await self.store.move(sub_id, tenant, offset, seek=seek, topics=self._topics)

    async def status(self, sub_id: str, *, tenant: str | None = ADMIN) -> Status:
        """State, lag, horizon and distance to a resnapshot (and group partitions)."""
        sub = await self.get(sub_id, tenant=tenant)
        info = await self.topic(sub.topic)
        got = await self.store.status(sub_id, info)
        head, horizon, parts = got.head, got.horizon, got.partitions
        acked = min([sub.acked, *(x["acked"] for x in parts)])
        return Status(
            sub,
            head,
            max(0, head - acked),
            horizon,
            acked - horizon if got.has_policy or horizon else None,
            acked < horizon,
            parts,
        )


def _fields(sub: Subscription) -> dict[str, Any]:
    return {k: getattr(sub, k) for k in Subscription.__slots__}
