"""Durable subscriptions and their consumer groups in the store.

``SubscriptionStore`` is the port ``reventless.subscribe`` reads and writes through; each
method is one transaction, the same one the subscription API ran before its SQL moved
here. Validation, tenancy rules and predicate compilation stay with the caller: a read
gets the predicate already compiled (``EventFilter.predicate``: the SQLAlchemy clause of
``reventless.predicate.Predicate.sql``, passed through as an opaque value). Errors
(``ResnapshotRequiredError``, ``AckBeyondHeadError``, ``LeaseLostError``...) are raised
inside the transaction, which then changes nothing.

Tables are in ``subscription_tables.py``, topic reads in ``catalog.py``; group leases
follow ``fairshare.py`` (the algorithm leased collector groups use too).

Example::

    store = SqlSubscriptionStore(db)
    await store.create_tables()
    topics = await store.topics()
    sub = await store.create(topics["orders"], "s-1", where=None, columns=None, types=None,
                             tenant=None, from_offset=1)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import (
    AckBeyondHeadError,
    BadRequestError,
    LeaseLostError,
    ResnapshotRequiredError,
    SubscriptionNotFoundError,
)
from ..ids import now_us
from . import fairshare
from . import subscription_tables as tables
from . import tables as store_tables
from .append import NOTIFY_CHANNEL
from .catalog import (
    EventFilter,
    StoredTopic,
    clauses,
    col,
    head_sync,
    horizon_sync,
    load_topics_sync,
    read_sync,
)
from .database import Database
from .fairshare import Grant

State = Literal["active", "paused", "closed"]
_S, _P, _W = tables.subscriptions, tables.partitions, tables.workers


@dataclass(frozen=True, slots=True)
class Subscription:
    """A stored subscription."""

    id: str
    topic: str
    predicate: str | None
    columns: tuple[str, ...] | None
    types: tuple[str, ...] | None
    tenant: str | None
    state: State
    acked: int


@dataclass(frozen=True, slots=True)
class Rows:
    """Stored rows (in ``StoredTopic.names`` order, offset first) read up to ``head``."""

    head: int
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class OwnedRows:
    """A group poll: the head, the partitions the worker holds (partition -> (epoch,
    acked)) and the rows of those partitions after their acks."""

    head: int
    owned: dict[int, tuple[int, int]]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class StatusRows:
    """What ``status`` reads: head, horizon, whether the topic has a retention policy,
    and the group partitions (``partition``, ``owner`` while its lease lasts, ``epoch``,
    ``acked``)."""

    head: int
    horizon: int
    has_policy: bool
    partitions: list[dict[str, Any]]


class SubscriptionStore(Protocol):
    """Subscriptions, their cursors and consumer-group leases (one transaction each)."""

    async def create_tables(self) -> None:
        """Create the subscription, lease and retention tables if missing."""
        ...

    async def topics(self) -> dict[str, StoredTopic]:
        """Every topic registered in the store."""
        ...

    async def create(
        self,
        topic: StoredTopic,
        sub_id: str,
        *,
        where: str | None,
        columns: Sequence[str] | None,
        types: Sequence[str] | None,
        tenant: str | None,
        from_offset: int | Literal["latest"],
    ) -> Subscription:
        """Store a new active subscription acked up to ``from_offset - 1`` (``latest``:
        the head); ``BadRequestError`` if the id exists or the offset is past the head."""
        ...

    async def get(self, sub_id: str, tenant: str | None) -> Subscription:
        """The open subscription (``SubscriptionNotFoundError``: unknown, closed or another
        tenant's)."""
        ...

    async def list(self, tenant: str | None) -> list[Subscription]:
        """Open subscriptions (of ``tenant``; None: all) by creation."""
        ...

    async def set_state(self, sub_id: str, state: State, tenant: str | None) -> Subscription:
        """Change the state; closing drops the group's leases and members."""
        ...

    async def move(
        self,
        sub_id: str,
        tenant: str | None,
        offset: int,
        *,
        seek: bool,
        topics: Mapping[str, StoredTopic],
    ) -> int:
        """Ack (forward only) or seek (either way; the group's partitions follow) the
        cursor; ``AckBeyondHeadError`` past the head. Returns the acked offset."""
        ...

    async def read(
        self, topic: StoredTopic, start: int, where: EventFilter, limit: int, *, rows: bool
    ) -> Rows:
        """Rows from ``start`` up to the head, at most ``limit`` (none unless ``rows``);
        ``ResnapshotRequiredError`` if retention deleted ``start``."""
        ...

    async def status(self, sub_id: str, topic: StoredTopic) -> StatusRows:
        """Head, horizon, policy and group partitions of a subscription."""
        ...

    async def heartbeat(
        self,
        sub: Subscription,
        topic: StoredTopic,
        worker: str,
        ttl: float,
        tenant: str | None,
    ) -> Grant:
        """Check the subscription is open, then join or stay in its group (fair share)."""
        ...

    async def poll_owned(
        self,
        topic: StoredTopic,
        sub_id: str,
        worker: str,
        where: EventFilter,
        limit: int,
        *,
        rows: bool,
    ) -> OwnedRows:
        """The partitions ``worker`` holds and their unacked rows (none unless ``rows``);
        ``ResnapshotRequiredError`` if one's ack is behind its retained horizon."""
        ...

    async def ack_owned(
        self, topic: StoredTopic, sub_id: str, worker: str, partition: int, offset: int, epoch: int
    ) -> int:
        """Move a partition's cursor if ``worker`` still holds it at ``epoch``
        (``LeaseLostError`` if not; ``AckBeyondHeadError`` past the head)."""
        ...

    async def leave(self, sub_id: str, worker: str) -> None:
        """Release ``worker``'s leases at once and drop its member row."""
        ...

    def on_commit(self, callback: Callable[[str], None]) -> None:
        """Call ``callback`` on the event loop when an append commits (PostgreSQL: its
        NOTIFY; a SQLite file: any commit, seen by a ``PRAGMA data_version`` probe)."""
        ...


def _sub_of(row: Any) -> Subscription:
    return Subscription(
        id=row.id,
        topic=row.topic,
        predicate=row.predicate,
        columns=None if row.columns is None else tuple(json.loads(row.columns)),
        types=None if row.types is None else tuple(json.loads(row.types)),
        tenant=row.tenant,
        state=row.state,
        acked=int(row.acked),
    )


class _Obj:
    """Attribute access over a dict (a freshly inserted row)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def get_sync(conn: Connection, sub_id: str, tenant: str | None) -> Subscription:
    """The open subscription ``sub_id`` of ``tenant`` (None: any) in the caller's
    transaction, else ``SubscriptionNotFoundError``."""
    row = conn.execute(sa.select(_S).where(_S.c.id == sub_id)).first()
    if row is None or row.state == "closed" or (tenant is not None and row.tenant != tenant):
        raise SubscriptionNotFoundError(f"no subscription {sub_id!r}")
    return _sub_of(row)


class SqlSubscriptionStore:
    """``SubscriptionStore`` on a SQL ``Database`` (SQLite, PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def create_tables(self) -> None:
        # the store's own tables too: a gateway may open a store no App has built yet
        # (its topic list is then empty, not an error)
        def create(conn: Connection) -> None:
            self.db.create_sync(conn, store_tables.metadata)
            self.db.create_sync(conn, tables.metadata)

        await self.db.write(create)

    async def topics(self) -> dict[str, StoredTopic]:
        return await self.db.read(load_topics_sync)

    async def create(
        self,
        topic: StoredTopic,
        sub_id: str,
        *,
        where: str | None,
        columns: Sequence[str] | None,
        types: Sequence[str] | None,
        tenant: str | None,
        from_offset: int | Literal["latest"],
    ) -> Subscription:
        def work(conn: Connection) -> Subscription:
            head = head_sync(self.db, conn, topic)
            acked = head if from_offset == "latest" else from_offset - 1
            if acked > head:
                raise BadRequestError(f"from_offset {from_offset} is beyond the head {head}")
            if conn.execute(sa.select(_S.c.id).where(_S.c.id == sub_id)).first():
                raise BadRequestError(f"subscription {sub_id!r} exists")
            values = {
                "id": sub_id,
                "topic": topic.name,
                "predicate": where,
                "columns": None if columns is None else json.dumps(list(columns)),
                "types": None if types is None else json.dumps(list(types)),
                "tenant": tenant,
                "state": "active",
                "acked": acked,
                "created_at": now_us(),
            }
            conn.execute(_S.insert().values(**values))
            return _sub_of(_Obj(values))

        return await self.db.write(work)

    async def get(self, sub_id: str, tenant: str | None) -> Subscription:
        return await self.db.read(lambda conn: get_sync(conn, sub_id, tenant))

    async def list(self, tenant: str | None) -> list[Subscription]:
        stmt = sa.select(_S).where(_S.c.state != "closed").order_by(_S.c.created_at, _S.c.id)
        if tenant is not None:
            stmt = stmt.where(_S.c.tenant == tenant)
        return await self.db.read(lambda conn: [_sub_of(r) for r in conn.execute(stmt)])

    async def set_state(self, sub_id: str, state: State, tenant: str | None) -> Subscription:
        def work(conn: Connection) -> Subscription:
            sub = get_sync(conn, sub_id, tenant)
            conn.execute(_S.update().where(_S.c.id == sub_id).values(state=state))
            if state == "closed":
                for tb in (_P, _W):
                    conn.execute(tb.delete().where(tb.c.subscription_id == sub_id))
            return Subscription(**{**_fields(sub), "state": state})

        return await self.db.write(work)

    async def move(
        self,
        sub_id: str,
        tenant: str | None,
        offset: int,
        *,
        seek: bool,
        topics: Mapping[str, StoredTopic],
    ) -> int:
        def work(conn: Connection) -> int:
            sub = get_sync(conn, sub_id, tenant)
            info = topics[sub.topic]
            head = head_sync(self.db, conn, info)
            if offset > head:
                raise AckBeyondHeadError(
                    f"offset {offset} is beyond the head {head} of {sub.topic!r}"
                )
            if not seek and offset <= sub.acked:
                return sub.acked
            conn.execute(_S.update().where(_S.c.id == sub_id).values(acked=offset))
            if seek:  # a group's partitions follow the cursor
                conn.execute(_P.update().where(_P.c.subscription_id == sub_id).values(acked=offset))
            return offset

        return await self.db.write(work)

    async def read(
        self, topic: StoredTopic, start: int, where: EventFilter, limit: int, *, rows: bool
    ) -> Rows:
        found = clauses(where)

        def work(conn: Connection) -> Rows:
            head = head_sync(self.db, conn, topic)
            horizon = horizon_sync(conn, topic.name)
            if start <= horizon:
                raise ResnapshotRequiredError(topic.name, start, horizon)
            if not rows:
                return Rows(head, [])
            return Rows(head, read_sync(conn, topic, start, head, found, limit))

        return await self.db.read(work)

    async def status(self, sub_id: str, topic: StoredTopic) -> StatusRows:
        def work(conn: Connection) -> StatusRows:
            head = head_sync(self.db, conn, topic)
            horizon = horizon_sync(conn, topic.name)
            policy = tables.retention
            has_policy = conn.execute(
                sa.select(policy.c.topic).where(policy.c.topic == topic.name)
            ).first()
            parts: list[dict[str, Any]] = [
                {
                    "partition": int(r.partition),
                    "owner": r.owner if r.expires_at >= time.time() else None,
                    "epoch": int(r.epoch),
                    "acked": int(r.acked),
                }
                for r in conn.execute(
                    sa.select(_P).where(_P.c.subscription_id == sub_id).order_by(_P.c.partition)
                )
            ]
            return StatusRows(head, horizon, bool(has_policy), parts)

        return await self.db.read(work)

    # -- consumer groups -------------------------------------------------------------------

    async def heartbeat(
        self,
        sub: Subscription,
        topic: StoredTopic,
        worker: str,
        ttl: float,
        tenant: str | None,
    ) -> Grant:
        def work(conn: Connection) -> Grant:
            get_sync(conn, sub.id, tenant)
            return fairshare.heartbeat(
                conn,
                fairshare.SUBSCRIPTION_LEASES,
                (sub.id,),
                worker,
                {sub.topic: topic.partitions},
                ttl,
                defaults={"acked": sub.acked},
            )

        return await self.db.write(work)

    async def poll_owned(
        self,
        topic: StoredTopic,
        sub_id: str,
        worker: str,
        where: EventFilter,
        limit: int,
        *,
        rows: bool,
    ) -> OwnedRows:
        found = clauses(where)

        def work(conn: Connection) -> OwnedRows:
            now = time.time()
            mine = list(
                conn.execute(
                    sa.select(_P)
                    .where(
                        _P.c.subscription_id == sub_id,
                        _P.c.owner == worker,
                        _P.c.expires_at >= now,
                    )
                    .order_by(_P.c.partition)
                )
            )
            head = head_sync(self.db, conn, topic)
            hz = tables.horizons
            horizons = {
                int(p): int(h)
                for p, h in conn.execute(
                    sa.select(hz.c.partition, hz.c.horizon).where(hz.c.topic == topic.name)
                )
            }
            for r in mine:
                if r.acked < horizons.get(r.partition, 0):
                    raise ResnapshotRequiredError(
                        topic.name, r.acked + 1, horizons[r.partition], r.partition
                    )
            owned = {int(r.partition): (int(r.epoch), int(r.acked)) for r in mine}
            if not rows or not mine:
                return OwnedRows(head, owned, [])
            part, off = col("_partition"), col("_offset")
            acked = sa.or_(*(sa.and_(part == r.partition, off > r.acked) for r in mine))
            start = min(int(r.acked) for r in mine) + 1
            return OwnedRows(
                head, owned, read_sync(conn, topic, start, head, [acked, *found], limit)
            )

        return await self.db.read(work)

    async def ack_owned(
        self, topic: StoredTopic, sub_id: str, worker: str, partition: int, offset: int, epoch: int
    ) -> int:
        def work(conn: Connection) -> int:
            head = head_sync(self.db, conn, topic)
            if offset > head:
                raise AckBeyondHeadError(f"offset {offset} is beyond the head {head}")
            done = conn.execute(
                _P.update()
                .where(
                    _P.c.subscription_id == sub_id,
                    _P.c.partition == partition,
                    _P.c.owner == worker,
                    _P.c.epoch == epoch,
                    _P.c.expires_at >= time.time(),
                )
                .values(acked=sa.case((_P.c.acked < offset, offset), else_=_P.c.acked))
            ).rowcount
            if not done:
                raise LeaseLostError(
                    f"worker {worker!r} does not hold partition {partition} at epoch {epoch}"
                )
            return offset

        return await self.db.write(work)

    async def leave(self, sub_id: str, worker: str) -> None:
        await self.db.write(
            lambda conn: fairshare.leave(conn, fairshare.SUBSCRIPTION_LEASES, (sub_id,), worker)
        )

    def on_commit(self, callback: Callable[[str], None]) -> None:
        self.db.listen(NOTIFY_CHANNEL, callback)  # PostgreSQL
        self.db.watch(callback)  # a SQLite file


def _fields(sub: Subscription) -> dict[str, Any]:
    return {k: getattr(sub, k) for k in Subscription.__slots__}
