"""The fair-share lease algorithm shared by leased collector groups and subscription groups.

A group (a collector component, a subscription) has a members table (one heartbeat row per
worker) and a lease table (one row per topic partition: owner, ``epoch``, ``expires_at``).
A ``heartbeat`` joins or renews the member's row, forgets members whose row expired,
ensures one lease row per partition, renews the leases the member holds, and claims free
or expired partitions up to its fair share (``fair_share``). Every change of owner is a
compare-and-set on the epoch, which grows with it: two members never both win a
partition, and a fence on the epoch refuses a stale owner's writes.

The two groups differ in small ways, declared once in their ``LeaseTables``:

- ``renew_expired``: a lease that expired but was not claimed by anyone is still the
  member's (collectors), or must be claimed anew at the next epoch (subscriptions);
- ``release_excess``: leases beyond the fair share are freed within the heartbeat
  (subscriptions), or returned as ``Grant.excess`` for the caller to give back once it
  stopped using them (collectors: ``release``);
- ``store_clock``: expiry is measured by the store's clock (PostgreSQL's
  ``clock_timestamp()``; collectors) or the host's (subscriptions);
- ``lock``: on PostgreSQL, the bookkeeping of one group takes turns behind a
  transaction-scoped advisory lock of this class (``None``: no lock).

Example::

    grant = db.write_sync(
        lambda conn: heartbeat(conn, COLLECTOR_LEASES, ("shop",), "w1", {"Order": 4}, 10.0)
    )
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import subscription_tables, tables
from .tables import insert_ignore

Part = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class LeaseTables:
    """How one kind of group keeps its leases: the tables, the columns naming a group
    (``scope``, in both tables), the lease table's topic column (``None``: a group reads
    one topic and its rows have no topic column) and the flags of the module docstring."""

    leases: sa.Table
    members: sa.Table
    scope: tuple[str, ...]
    topic: str | None = None
    renew_expired: bool = False
    release_excess: bool = False
    store_clock: bool = False
    lock: int | None = None
    #: Columns of a lease row besides scope, topic, partition, owner, epoch, expires_at
    #: that a heartbeat fills when it creates the row (values come per call).
    extra: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Grant:
    """One heartbeat's outcome: the partitions the member holds within its fair share and
    beyond it (``excess``: to give back; empty with ``release_excess``), each with its
    epoch; the live members (sorted), and the heartbeat's time and lease expiry."""

    held: dict[Part, int]
    excess: dict[Part, int]
    members: tuple[str, ...]
    expires_at: float
    now: float = 0.0


#: Leased collector groups (``rv_collector_leases``/``rv_collector_members``), one group
#: per component over several topics. The lock class spells "rvls".
COLLECTOR_LEASES = LeaseTables(
    tables.collector_leases,
    tables.collector_members,
    scope=("component",),
    topic="topic",
    renew_expired=True,
    store_clock=True,
    lock=0x72766C73,
)

#: Subscription groups (``rv_sub_partitions``/``rv_sub_workers``), one group per
#: subscription over its one topic; a new lease row starts at the subscription's ``acked``.
SUBSCRIPTION_LEASES = LeaseTables(
    subscription_tables.partitions,
    subscription_tables.workers,
    scope=("subscription_id",),
    release_excess=True,
    extra=("acked",),
)


def fair_share(partitions: int, members: Sequence[str], me: str) -> int:
    """How many of a topic's ``partitions`` member ``me`` may hold among the live
    ``members`` (sorted): ``partitions // len(members)``, one more for the first
    ``partitions % len(members)`` of them."""
    share, extra = divmod(partitions, max(1, len(members)))
    index = members.index(me) if me in members else len(members)
    return share + (1 if index < extra else 0)


def store_time(conn: Connection) -> float:
    """Seconds since the epoch by the store's clock (PostgreSQL's; on SQLite the host's)."""
    if conn.dialect.name == "postgresql":
        now = conn.exec_driver_sql("SELECT extract(epoch FROM clock_timestamp())").scalar_one()
        return float(now)
    return time.time()


def serialize(conn: Connection, spec: LeaseTables, scope: Sequence[Any]) -> None:
    """On PostgreSQL with ``spec.lock``, make the heartbeats, releases and leaves of one
    group take turns (a transaction-scoped advisory lock): each touches several lease and
    member rows, and two in opposite orders would deadlock. SQLite's writers take turns
    anyway."""
    if spec.lock is not None and conn.dialect.name == "postgresql":
        key = "\x1f".join(str(v) for v in scope)
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (spec.lock, key))


def _in(table: sa.Table, spec: LeaseTables, scope: Sequence[Any]) -> list[sa.ColumnElement[bool]]:
    return [table.c[name] == value for name, value in zip(spec.scope, scope, strict=True)]


def _lease(spec: LeaseTables, scope: Sequence[Any], key: Part) -> list[sa.ColumnElement[bool]]:
    where = _in(spec.leases, spec, scope)
    if spec.topic is not None:
        where.append(spec.leases.c[spec.topic] == key[0])
    where.append(spec.leases.c.partition == key[1])
    return where


def heartbeat(
    conn: Connection,
    spec: LeaseTables,
    scope: Sequence[Any],
    worker: str,
    topics: Mapping[str, int],
    ttl: float,
    *,
    now: float | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Grant:
    """Join or stay in the group ``scope``: renew held leases, claim free or expired
    partitions of each topic (name -> partition count) up to the fair share, and release
    or report the excess. ``now`` (seconds) is for tests; by default the clock of
    ``spec``. ``defaults`` fills ``spec.extra`` columns of lease rows created now. Runs in
    the caller's transaction."""
    serialize(conn, spec, scope)
    if now is None:
        now = store_time(conn) if spec.store_clock else time.time()
    until = now + ttl
    lt, mt = spec.leases, spec.members
    group = dict(zip(spec.scope, scope, strict=True))
    mine = (*_in(mt, spec, scope), mt.c.worker == worker)
    if not conn.execute(mt.update().where(*mine).values(expires_at=until)).rowcount:
        insert_ignore(conn, mt, [{**group, "worker": worker, "expires_at": until}])
    conn.execute(mt.delete().where(*_in(mt, spec, scope), mt.c.expires_at < now))
    live = tuple(
        sorted(str(w) for (w,) in conn.execute(sa.select(mt.c.worker).where(*_in(mt, spec, scope))))
    )
    extra = {name: (defaults or {})[name] for name in spec.extra}
    insert_ignore(
        conn,
        lt,
        [
            {
                **group,
                **({} if spec.topic is None else {spec.topic: t}),
                "partition": p,
                "owner": None,
                "epoch": 0,
                "expires_at": 0.0,
                **extra,
            }
            for t, n in topics.items()
            for p in range(n)
        ],
    )
    cols = [lt.c.partition, lt.c.owner, lt.c.epoch, lt.c.expires_at]
    stmt = sa.select(*cols).where(*_in(lt, spec, scope))
    if spec.topic is not None:
        topic_col = lt.c[spec.topic]
        stmt = stmt.add_columns(topic_col.label("topic")).where(topic_col.in_(list(topics)))
        stmt = stmt.order_by(topic_col, lt.c.partition)
    else:
        stmt = stmt.order_by(lt.c.partition)
    rows = conn.execute(stmt).all()
    held: dict[Part, int] = {}
    excess: dict[Part, int] = {}
    for topic, n in topics.items():
        fair = fair_share(n, live, worker)
        part_rows = [
            r for r in rows if (spec.topic is None or r.topic == topic) and r.partition < n
        ]
        count = 0
        for r in part_rows:  # renew what this member holds
            if r.owner != worker or (not spec.renew_expired and r.expires_at < now):
                continue
            key = (topic, int(r.partition))
            cas = (*_lease(spec, scope, key), lt.c.owner == worker, lt.c.epoch == r.epoch)
            if spec.release_excess and count >= fair:  # let a newer member have it
                conn.execute(lt.update().where(*cas).values(owner=None, expires_at=0.0))
            elif conn.execute(lt.update().where(*cas).values(expires_at=until)).rowcount:
                (held if count < fair else excess)[key] = int(r.epoch)
                count += 1
        for r in part_rows:  # claim what is free or expired, up to the fair share
            if count >= fair:
                break
            key = (topic, int(r.partition))
            if key in held or (spec.renew_expired and r.owner == worker):
                continue
            if r.owner is not None and r.expires_at >= now:
                continue
            claimed = conn.execute(
                lt.update()
                .where(
                    *_lease(spec, scope, key),
                    lt.c.epoch == r.epoch,
                    sa.or_(lt.c.owner.is_(None), lt.c.expires_at < now),
                )
                .values(owner=worker, epoch=r.epoch + 1, expires_at=until)
            ).rowcount
            if claimed:
                held[key] = int(r.epoch) + 1
                count += 1
    return Grant(held, excess, live, until, now)


def release(
    conn: Connection,
    spec: LeaseTables,
    scope: Sequence[Any],
    worker: str,
    leases: Mapping[Part, int],
) -> None:
    """Give back ``leases`` (partition -> epoch) still held at those epochs: others may
    claim them at once."""
    serialize(conn, spec, scope)
    lt = spec.leases
    for key, epoch in leases.items():
        conn.execute(
            lt.update()
            .where(*_lease(spec, scope, key), lt.c.owner == worker, lt.c.epoch == epoch)
            .values(owner=None, expires_at=0.0)
        )


def leave(conn: Connection, spec: LeaseTables, scope: Sequence[Any], worker: str) -> None:
    """Give back every lease of ``worker`` in the group ``scope`` and leave it."""
    serialize(conn, spec, scope)
    lt, mt = spec.leases, spec.members
    conn.execute(
        lt.update()
        .where(*_in(lt, spec, scope), lt.c.owner == worker)
        .values(owner=None, expires_at=0.0)
    )
    conn.execute(mt.delete().where(*_in(mt, spec, scope), mt.c.worker == worker))
