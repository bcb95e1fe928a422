"""Consumer groups: workers of one subscription share its topic partitions through leases.

Each partition of the subscription's topic has a row (``rv_sub_partitions``) with an owner,
a lease expiry and an ``epoch`` that grows with every change of owner. A worker
``heartbeat``s to join, renew what it holds and claim free or expired partitions up to its
fair share (``partitions // members``, one more for the first ``partitions % members``
members by name), releasing any excess. Every change is a
compare-and-set on the epoch, so two workers never both win a partition, and a claim
succeeds only once the previous lease has expired. Acks carry the epoch and are refused
(``LeaseLostError``) unless the worker still holds that lease: a worker that stopped
renewing cannot ack after its partitions were taken over. One partition has one owner at a
time, so per-aggregate order is kept.

Example::

    member = subs.member(sub.id, "worker-1", ttl=10.0)
    leases = await member.heartbeat()          # {partition: epoch}
    page = await member.poll(limit=100)        # events of the owned partitions
    for ev in page.events:
        ...
        await member.ack(ev["partition"], ev["offset"], page.leases[ev["partition"]])
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import AckBeyondHeadError, BadRequestError, LeaseLostError, ResnapshotRequiredError
from ..store import fairshare
from . import tables
from .catalog import col, events_of, head_sync
from .service import Page, read_sync

if TYPE_CHECKING:
    from .service import Subscriptions

_P, _W = tables.partitions, tables.workers


@dataclass(frozen=True, slots=True)
class Leases:
    """The partitions a worker holds (partition -> epoch), from ``granted_at`` to
    ``expires_at`` (``time.time()`` seconds): stop processing at ``expires_at`` unless a
    later heartbeat renewed them."""

    epochs: dict[int, int]
    granted_at: float
    expires_at: float

    def as_json(self) -> dict[str, Any]:
        """The JSON body the gateway returns."""
        return {
            "leases": {str(p): e for p, e in sorted(self.epochs.items())},
            "granted_at": self.granted_at,
            "expires_at": self.expires_at,
        }


class Member:
    """One worker of a subscription's consumer group (see the module docstring)."""

    def __init__(
        self, subs: Subscriptions, sub_id: str, worker: str, *, ttl: float, tenant: str | None
    ) -> None:
        if not worker or len(worker) > 200:
            raise BadRequestError("a worker id has 1..200 characters")
        if not 0.05 <= ttl <= 3600:
            raise BadRequestError(f"ttl must be 0.05..3600 seconds, got {ttl!r}")
        self.subs, self.sub_id, self.worker, self.ttl, self.tenant = (
            subs,
            sub_id,
            worker,
            ttl,
            tenant,
        )

    def _mine(self, conn: Connection, now: float) -> list[Any]:
        return list(
            conn.execute(
                sa.select(_P)
                .where(
                    _P.c.subscription_id == self.sub_id,
                    _P.c.owner == self.worker,
                    _P.c.expires_at >= now,
                )
                .order_by(_P.c.partition)
            )
        )

    async def heartbeat(self) -> Leases:
        """Join or stay in the group: renew held leases, claim up to the fair share."""
        subs, sid, me = self.subs, self.sub_id, self.worker
        sub = await subs.get(sid, tenant=self.tenant)
        info = await subs.topic(sub.topic)

        def work(conn: Connection) -> Leases:
            subs._get_sync(conn, sid, self.tenant)
            grant = fairshare.heartbeat(
                conn,
                fairshare.SUBSCRIPTION_LEASES,
                (sid,),
                me,
                {sub.topic: info.partitions},
                self.ttl,
                defaults={"acked": sub.acked},
            )
            held = {p: e for (_, p), e in grant.held.items()}
            return Leases(held, grant.now, grant.expires_at)

        return await subs.db.write(work)

    async def poll(self, *, limit: int = 100) -> Page:
        """Unacked events of the partitions this worker holds, in offset order (each
        partition from its ack + 1). Poll again after acking to get the next events."""
        subs = self.subs
        subs.check_limit(limit)
        sub = await subs.get(self.sub_id, tenant=self.tenant)
        info = await subs.topic(sub.topic)
        where = subs.where(info, sub)

        def work(conn: Connection) -> Page:
            now = time.time()
            mine = self._mine(conn, now)
            head = head_sync(subs.db, conn, info)
            hz = tables.horizons
            horizons = {
                int(p): int(h)
                for p, h in conn.execute(
                    sa.select(hz.c.partition, hz.c.horizon).where(hz.c.topic == info.name)
                )
            }
            for r in mine:
                if r.acked < horizons.get(r.partition, 0):
                    raise ResnapshotRequiredError(
                        info.name, r.acked + 1, horizons[r.partition], r.partition
                    )
            leases = {int(r.partition): int(r.epoch) for r in mine}
            lag = max((head - int(r.acked) for r in mine), default=0)
            if sub.state == "paused" or not mine:
                return Page([], head + 1, head, lag, sub.state, leases)
            part, off = col("_partition"), col("_offset")
            owned = sa.or_(*(sa.and_(part == r.partition, off > r.acked) for r in mine))
            start = min(int(r.acked) for r in mine) + 1
            rows = read_sync(conn, info, start, head, [owned, *where], limit)
            nxt = rows[-1][0] + 1 if len(rows) == limit else head + 1
            return Page(events_of(info, rows, sub.columns), nxt, head, lag, sub.state, leases)

        return await subs.db.read(work)

    async def ack(self, partition: int, offset: int, epoch: int) -> int:
        """Persist the partition's cursor, fenced by the lease ``epoch`` (``LeaseLostError``
        if this worker no longer holds it; nothing changes)."""
        for name, v in (("partition", partition), ("offset", offset), ("epoch", epoch)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise BadRequestError(f"{name} must be an integer >= 0, got {v!r}")
        subs = self.subs
        sub = await subs.get(self.sub_id, tenant=self.tenant)
        info = await subs.topic(sub.topic)

        def work(conn: Connection) -> int:
            head = head_sync(subs.db, conn, info)
            if offset > head:
                raise AckBeyondHeadError(f"offset {offset} is beyond the head {head}")
            done = conn.execute(
                _P.update()
                .where(
                    _P.c.subscription_id == self.sub_id,
                    _P.c.partition == partition,
                    _P.c.owner == self.worker,
                    _P.c.epoch == epoch,
                    _P.c.expires_at >= time.time(),
                )
                .values(acked=sa.case((_P.c.acked < offset, offset), else_=_P.c.acked))
            ).rowcount
            if not done:
                raise LeaseLostError(
                    f"worker {self.worker!r} does not hold partition {partition} at epoch {epoch}"
                )
            return offset

        return await subs.db.write(work)

    async def leave(self) -> None:
        """Release this worker's leases at once (others may claim them immediately)."""

        def work(conn: Connection) -> None:
            key = (_P.c.subscription_id == self.sub_id, _P.c.owner == self.worker)
            conn.execute(_P.update().where(*key).values(owner=None, expires_at=0.0))
            conn.execute(
                _W.delete().where(_W.c.subscription_id == self.sub_id, _W.c.worker == self.worker)
            )

        await self.subs.get(self.sub_id, tenant=self.tenant)
        await self.subs.db.write(work)
