"""Leased collector groups: processes running one collector share its topic partitions.

With ``CollectorOptions(group="leased")`` every process running a collector is a member
named by a worker id. ``rv_collector_leases`` has one row per (component, topic,
partition): its owner, the lease expiry and an ``epoch`` that grows with every change of
owner; ``rv_collector_members`` holds the members' heartbeats. Every ``heartbeat`` seconds
a member renews what it holds, claims free or expired partitions up to its fair share of
each topic (``partitions // members``, one more for the first ``partitions % members``
members by name) and gives back what it holds beyond that, so a new member gets its share.
Every change is a compare-and-set on the epoch: two members never both win a partition.

A gained partition loads its checkpoint, subscribes to the broker with a consumer group of
its own (``group_name``: a NATS durable consumer per partition, reused by whichever
process owns it) and catches up from the store; a lost one stops delivering and closes its
subscription. The commit of a partition's checkpoint (with the read-model rows or dead
letters of the batch) first checks, in the same transaction, that this member still holds
the partition at its epoch (``Membership.fence_sync``); if not, the transaction rolls back
with ``LeaseLostError`` and the partition is dropped here. A paused or slow ex-owner can
therefore never land anything after its partition was taken over.

Clocks: lease expiry is measured by the store's clock: PostgreSQL's ``clock_timestamp()``,
and on SQLite the host's clock (the processes sharing a SQLite file share a host). A
member also stops delivering on its own once ``lease_ttl`` has passed, by its monotonic
clock, since the start of its last successful heartbeat, which is before the store
considers the lease expired. Correctness does not depend on either: the fence does.

Example::

    opts = rv.CollectorOptions(group="leased", lease_ttl=10.0)
    app = rv.App(store="postgresql+psycopg://...", options=rv.AppOptions(collector=opts))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..broker import Subscription
from ..errors import LeaseLostError
from ..store import tables
from ..store.database import Database
from . import deadletter

if TYPE_CHECKING:
    from .runtime import Collector

log = logging.getLogger("reventless.collect")

Part = tuple[str, int]  # (topic, partition)
_L, _M = tables.collector_leases, tables.collector_members


def default_worker() -> str:
    """A worker id unique among live processes: ``hostname-pid-random``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def group_name(component: str, topic: str, partition: int) -> str:
    """The broker consumer group of one leased partition: every process that owns the
    partition in turn subscribes with it (on NATS: one durable consumer per partition)."""
    return f"{component}.lease.{topic}.{partition}"


def fair_share(partitions: int, members: Sequence[str], me: str) -> int:
    """How many of a topic's ``partitions`` member ``me`` may hold among the live
    ``members`` (sorted): ``partitions // len(members)``, one more for the first
    ``partitions % len(members)`` of them."""
    share, extra = divmod(partitions, max(1, len(members)))
    index = members.index(me) if me in members else len(members)
    return share + (1 if index < extra else 0)


@dataclass(frozen=True, slots=True)
class Grant:
    """One heartbeat's outcome: the partitions the member holds within its fair share and
    beyond it (``excess``: to give back), each with its epoch; the live members (sorted)
    and when the leases expire (store clock)."""

    held: dict[Part, int]
    excess: dict[Part, int]
    members: tuple[str, ...]
    expires_at: float


def store_time(conn: Connection) -> float:
    """Seconds since the epoch by the store's clock (PostgreSQL's; on SQLite the host's)."""
    if conn.dialect.name == "postgresql":
        now = conn.exec_driver_sql("SELECT extract(epoch FROM clock_timestamp())").scalar_one()
        return float(now)
    return time.time()


#: Advisory lock class of a component's lease bookkeeping ("rvls"): see ``_serialize``.
_LEASE_LOCK = 0x72766C73


def _serialize(conn: Connection, component: str) -> None:
    """On PostgreSQL, make the heartbeats, releases and leaves of one component's members
    take turns (a transaction-scoped advisory lock): each touches several lease and member
    rows, and two in opposite orders would deadlock. Commits are not serialised by it;
    they share-lock their one lease row (``holds_sync``). SQLite's writers take turns
    anyway."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LEASE_LOCK, component)
        )


def heartbeat_sync(
    conn: Connection,
    component: str,
    worker: str,
    topics: Mapping[str, int],
    ttl: float,
    *,
    now: float | None = None,
) -> Grant:
    """Join or stay in ``component``'s group: renew held leases, claim free or expired
    partitions of each topic (name -> partition count) up to the fair share. ``now``
    (seconds, store clock) is for tests; by default the store's time."""
    _serialize(conn, component)
    now = store_time(conn) if now is None else now
    until = now + ttl
    mine = (_M.c.component == component, _M.c.worker == worker)
    if not conn.execute(_M.update().where(*mine).values(expires_at=until)).rowcount:
        tables.insert_ignore(
            conn, _M, [{"component": component, "worker": worker, "expires_at": until}]
        )
    conn.execute(_M.delete().where(_M.c.component == component, _M.c.expires_at < now))
    live = tuple(
        sorted(
            str(w)
            for (w,) in conn.execute(sa.select(_M.c.worker).where(_M.c.component == component))
        )
    )
    tables.insert_ignore(
        conn,
        _L,
        [
            {
                "component": component,
                "topic": t,
                "partition": p,
                "owner": None,
                "epoch": 0,
                "expires_at": 0.0,
            }
            for t, n in topics.items()
            for p in range(n)
        ],
    )
    rows = conn.execute(
        sa.select(_L.c.topic, _L.c.partition, _L.c.owner, _L.c.epoch, _L.c.expires_at)
        .where(_L.c.component == component, _L.c.topic.in_(list(topics)))
        .order_by(_L.c.topic, _L.c.partition)
    ).all()
    held: dict[Part, int] = {}
    excess: dict[Part, int] = {}
    for topic, n in topics.items():
        fair = fair_share(n, live, worker)
        part_rows = [r for r in rows if r.topic == topic and r.partition < n]
        count = 0
        for r in part_rows:  # renew: a lease that expired unclaimed is still this member's
            if r.owner != worker:
                continue
            key = (topic, int(r.partition))
            renewed = conn.execute(
                _L.update()
                .where(*_row(component, key), _L.c.owner == worker, _L.c.epoch == r.epoch)
                .values(expires_at=until)
            ).rowcount
            if renewed:
                (held if count < fair else excess)[key] = int(r.epoch)
                count += 1
        for r in part_rows:  # claim what is free or expired, up to the fair share
            if count >= fair:
                break
            if r.owner == worker or (r.owner is not None and r.expires_at >= now):
                continue
            key = (topic, int(r.partition))
            claimed = conn.execute(
                _L.update()
                .where(
                    *_row(component, key),
                    _L.c.epoch == r.epoch,
                    sa.or_(_L.c.owner.is_(None), _L.c.expires_at < now),
                )
                .values(owner=worker, epoch=r.epoch + 1, expires_at=until)
            ).rowcount
            if claimed:
                held[key] = int(r.epoch) + 1
                count += 1
    return Grant(held, excess, live, until)


def _row(component: str, key: Part) -> tuple[sa.ColumnElement[bool], ...]:
    return (_L.c.component == component, _L.c.topic == key[0], _L.c.partition == key[1])


def release_sync(conn: Connection, component: str, worker: str, leases: Mapping[Part, int]) -> None:
    """Give back ``leases`` (partition -> epoch) still held at those epochs: others may
    claim them at once."""
    _serialize(conn, component)
    for key, epoch in leases.items():
        conn.execute(
            _L.update()
            .where(*_row(component, key), _L.c.owner == worker, _L.c.epoch == epoch)
            .values(owner=None, expires_at=0.0)
        )


def leave_sync(conn: Connection, component: str, worker: str) -> None:
    """Give back every lease of ``worker`` and leave the group."""
    _serialize(conn, component)
    conn.execute(
        _L.update()
        .where(_L.c.component == component, _L.c.owner == worker)
        .values(owner=None, expires_at=0.0)
    )
    conn.execute(_M.delete().where(_M.c.component == component, _M.c.worker == worker))


def holds_sync(
    db: Database, conn: Connection, component: str, worker: str, key: Part, epoch: int
) -> bool:
    """Whether ``worker`` holds partition ``key`` at ``epoch`` (inside the caller's
    transaction). On PostgreSQL the row stays share-locked until the transaction ends, so
    a concurrent claim waits for it to commit and then sees what it wrote."""
    q, m = db.q, db.mark
    sql = (
        f"SELECT 1 FROM rv_collector_leases WHERE component = {m} AND topic = {m} "
        f"AND {q('partition')} = {m} AND owner = {m} AND epoch = {m}"
    )
    if not db.is_sqlite:  # SQLite's writers are serialised anyway (BEGIN IMMEDIATE)
        sql += " FOR SHARE"
    row = conn.exec_driver_sql(sql, (component, key[0], key[1], worker, epoch)).first()
    return row is not None


class Membership:
    """This process's membership in a collector's leased group: a heartbeat task that
    renews and claims leases, and a task that applies what the heartbeats granted to the
    collector (gain: checkpoint, subscription, catch-up; loss: stop, unsubscribe)."""

    def __init__(self, collector: Collector, worker: str, ttl: float, interval: float) -> None:
        self.collector = collector
        self.db = collector.db
        self.component = collector.name
        self.worker, self.ttl, self.interval = worker, ttl, interval
        #: The partitions this process runs, with the epoch it holds them at.
        self.epochs: dict[Part, int] = {}
        #: The live members of the group at the last heartbeat (sorted).
        self.members: tuple[str, ...] = ()
        self._held: dict[Part, int] = {}
        self._excess: dict[Part, int] = {}
        self._subs: dict[Part, Subscription] = {}
        self._catching_up: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._deadline = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def _partitions(self) -> dict[str, int]:
        return {n: t.partitions for n, t in self.collector.topics.items()}

    async def start(self) -> None:
        """Join the group, take up the partitions granted and catch them up, then keep
        heartbeating in the background."""
        loop = self._loop = asyncio.get_running_loop()
        self._stopping = False
        started = loop.time()
        self._granted(await self._heartbeat(), started)
        await self._apply()
        await asyncio.gather(*self._catching_up, return_exceptions=True)
        self._tasks = [
            loop.create_task(self._beat_loop(), name=f"rv-lease-beat-{self.component}"),
            loop.create_task(self._apply_loop(), name=f"rv-lease-apply-{self.component}"),
        ]

    async def stop(self) -> None:
        """Stop heartbeating, stop every partition and give the leases back at once."""
        tasks = [*self._tasks, *self._catching_up]
        self._tasks = []
        self._stopping = True  # a loop that missed its cancel ends at its next turn
        self._changed.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._drop(list(self.epochs))
        self._held.clear()
        self._excess.clear()
        try:
            await self.db.write(partial(leave_sync, component=self.component, worker=self.worker))
        except Exception as exc:  # they expire after lease_ttl instead
            log.warning("collector %s: could not give back its leases: %s", self.component, exc)

    # -- the fence (called on the writer thread, inside the commit's transaction) ----------

    def fence_sync(self, conn: Connection, topic: str, partition: int) -> None:
        """Raise ``LeaseLostError`` (rolling the caller's transaction back) unless this
        member still holds the partition at the epoch it runs it with."""
        key = (topic, partition)
        epoch = self.epochs.get(key)
        if epoch is not None and holds_sync(self.db, conn, self.component, self.worker, key, epoch):
            return
        if self._loop is not None and epoch is not None:
            self._loop.call_soon_threadsafe(self._fenced, key, epoch)
        raise LeaseLostError(
            f"collector {self.component!r} worker {self.worker!r} no longer holds topic "
            f"{topic!r} partition {partition} (epoch {epoch}): nothing of the batch landed"
        )

    def _fenced(self, key: Part, epoch: int) -> None:
        if self.epochs.get(key) != epoch:
            return
        log.warning(
            "collector %s: partition %s/%d was taken over (epoch %d is stale): stopping it",
            self.component,
            key[0],
            key[1],
            epoch,
        )
        for granted in (self._held, self._excess):
            if granted.get(key) == epoch:
                del granted[key]
        self._changed.set()

    # -- heartbeats --------------------------------------------------------------------------

    async def _heartbeat(self) -> Grant:
        return await self.db.write(
            partial(
                heartbeat_sync,
                component=self.component,
                worker=self.worker,
                topics=self._partitions,
                ttl=self.ttl,
            )
        )

    def _granted(self, grant: Grant, started: float) -> None:
        self._deadline = started + self.ttl
        self._held, self._excess = dict(grant.held), dict(grant.excess)
        self.members = grant.members
        self._changed.set()

    async def _beat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await asyncio.sleep(self.interval)
            started = loop.time()
            try:
                grant = await self._heartbeat()
            except Exception as exc:
                log.warning("collector %s: lease heartbeat failed: %s", self.component, exc)
                continue
            self._granted(grant, started)

    async def _apply_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            left = self._deadline - loop.time()
            if left > 0:
                # asyncio.timeout, not wait_for: 3.11's wait_for swallows a cancel that
                # lands as the event is set, and stop() then waits for this loop forever
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await self._changed.wait()
            else:
                await self._changed.wait()
            if self._stopping:
                return
            self._changed.clear()
            if loop.time() >= self._deadline and (self._held or self._excess):
                log.warning(
                    "collector %s: no lease heartbeat succeeded for %.1fs: stopping its "
                    "partitions until one does",
                    self.component,
                    self.ttl,
                )
                self._held.clear()
                self._excess.clear()
            try:
                await self._apply()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("collector %s: applying its leases failed", self.component)

    # -- applying grants to the collector ----------------------------------------------------

    async def _apply(self) -> None:
        c = self.collector
        ours = {**self._held, **self._excess}
        lost = [k for k, e in self.epochs.items() if ours.get(k) != e]
        give = {} if c.paused else dict(self._excess)
        await self._drop([*lost, *(k for k in give if k in self.epochs and k not in lost)])
        if give:
            await self.db.write(
                partial(release_sync, component=self.component, worker=self.worker, leases=give)
            )
            for k in give:
                self._excess.pop(k, None)
            log.info("collector %s: gave back %s (rebalance)", self.component, sorted(give))
        for key, epoch in list(self._held.items()):
            if key not in self.epochs:
                await self._gain(key, epoch)
        for key in [k for k in self.epochs if k not in self._subs]:
            await self._subscribe(key)  # a broker that was down at the gain

    async def _gain(self, key: Part, epoch: int) -> None:
        c = self.collector

        def load(conn: Connection) -> tuple[int, set[tuple[str, str]]]:
            sql = (
                f"SELECT {c.db.q('offset')} FROM rv_checkpoints WHERE component = {c.db.mark} "
                f"AND topic = {c.db.mark} AND {c.db.q('partition')} = {c.db.mark}"
            )
            cp = conn.exec_driver_sql(sql, (c.name, *key)).scalar()
            return int(cp or 0), deadletter.parked_sync(c.db, conn, c.name)

        async with c._lock:  # nothing of this collector is in flight meanwhile
            # read after the claim committed: the previous owner's last commit is in it
            cp, parked = await self.db.read(load)
            c.parked = parked
            c.checkpoints[key] = cp
            self.epochs[key] = epoch
            self._owned()
        log.info(
            "collector %s: took partition %s/%d (epoch %d) at offset %d",
            c.name,
            key[0],
            key[1],
            epoch,
            cp,
        )
        await self._subscribe(key)
        task = asyncio.get_running_loop().create_task(self._catch_up(key, epoch))
        self._catching_up.add(task)
        task.add_done_callback(self._catching_up.discard)

    async def _subscribe(self, key: Part) -> None:
        c = self.collector
        topic, partition = key
        try:
            self._subs[key] = await c.broker.subscribe(
                group_name(c.name, topic, partition),
                [topic],
                c._on_messages,
                partitions=[partition],
                **c._subscribe_options(),
            )
        except Exception as exc:  # the store poll covers the partition meanwhile
            log.warning("collector %s: cannot subscribe %s/%d: %s", c.name, topic, partition, exc)

    async def _catch_up(self, key: Part, epoch: int) -> None:
        c = self.collector
        try:
            async with c._lock:
                if self.epochs.get(key) == epoch:
                    await c._catch_up(key)
        except asyncio.CancelledError:
            raise
        except LeaseLostError:
            pass  # dropped by the next apply
        except Exception:
            log.exception("collector %s: catch-up of %s/%d failed", c.name, *key)

    async def _drop(self, keys: list[Part]) -> None:
        """Stop delivering ``keys`` (waiting for work in flight), then unsubscribe them."""
        if not keys:
            return
        c = self.collector
        async with c._lock:
            for key in keys:
                self.epochs.pop(key, None)
                c.checkpoints.pop(key, None)
                c.resnapshot_required.pop(key, None)
            self._owned()
        # after the lock: a handler waiting for it returns (the partition is not ours)
        for key in keys:
            sub = self._subs.pop(key, None)
            if sub is not None:
                try:
                    await sub.close()
                except Exception as exc:
                    log.warning("collector %s: closing %s/%d: %s", c.name, *key, exc)
        log.info("collector %s: stopped %s", c.name, sorted(keys))

    def _owned(self) -> None:
        c = self.collector
        c.owned = {t: sorted(p for (n, p) in self.epochs if n == t) for t in c.topics}
