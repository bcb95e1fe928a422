"""Consumer groups: workers of one subscription share its topic partitions through leases.

Each partition of the subscription's topic has a row (``rv_sub_partitions``) with an owner,
a lease expiry and an ``epoch`` that grows with every change of owner. A worker
``heartbeat``s to join, renew what it holds and claim free or expired partitions up to its
fair share (``partitions // members``, one more for the first ``partitions % members``
members by name), releasing any excess (the algorithm leased collector groups use too:
``reventless.store.fairshare``). Every change is a compare-and-set on the epoch, so two
workers never both win a partition, and a claim succeeds only once the previous lease has
expired. Acks carry the epoch and are refused (``LeaseLostError``) unless the worker still
holds that lease: a worker that stopped renewing cannot ack after its partitions were
taken over. One partition has one owner at a time, so per-aggregate order is kept.

Example::

    member = subs.member(sub.id, "worker-1", ttl=10.0)
    leases = await member.heartbeat()          # {partition: epoch}
    page = await member.poll(limit=100)        # events of the owned partitions
    for ev in page.events:
        ...
        await member.ack(ev["partition"], ev["offset"], page.leases[ev["partition"]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..codec import OFFSET_AT
from ..errors import BadRequestError
from .catalog import events_of
from .page import Page

if TYPE_CHECKING:
    from .service import Subscriptions


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

    async def heartbeat(self) -> Leases:
        """Join or stay in the group: renew held leases, claim up to the fair share."""
        subs = self.subs
        sub = await subs.get(self.sub_id, tenant=self.tenant)
        info = await subs.topic(sub.topic)
        grant = await subs.store.heartbeat(sub, info, self.worker, self.ttl, self.tenant)
        held = {p: e for (_, p), e in grant.held.items()}
        return Leases(held, grant.now, grant.expires_at)

    async def poll(self, *, limit: int = 100) -> Page:
        """Unacked events of the partitions this worker holds, in offset order (each
        partition from its ack + 1). Poll again after acking to get the next events."""
        subs = self.subs
        subs.check_limit(limit)
        sub = await subs.get(self.sub_id, tenant=self.tenant)
        info = await subs.topic(sub.topic)
        where = subs.where(info, sub)
        got = await subs.store.poll_owned(
            info, self.sub_id, self.worker, where, limit, rows=sub.state != "paused"
        )
        head, rows = got.head, got.rows
        leases = {p: epoch for p, (epoch, _) in got.owned.items()}
        lag = max((head - acked for _, acked in got.owned.values()), default=0)
        if sub.state == "paused" or not got.owned:
            return Page([], head + 1, head, lag, sub.state, leases)
        nxt = rows[-1][OFFSET_AT] + 1 if len(rows) == limit else head + 1
        shown = await subs.shown(info, rows)
        return Page(events_of(info, shown, sub.columns), nxt, head, lag, sub.state, leases)

    async def ack(self, partition: int, offset: int, epoch: int) -> int:
        """Persist the partition's cursor, fenced by the lease ``epoch`` (``LeaseLostError``
        if this worker no longer holds it; nothing changes)."""
        for name, v in (("partition", partition), ("offset", offset), ("epoch", epoch)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise BadRequestError(f"{name} must be an integer >= 0, got {v!r}")
        subs = self.subs
        sub = await subs.get(self.sub_id, tenant=self.tenant)
        info = await subs.topic(sub.topic)
        return await subs.store.ack_owned(info, self.sub_id, self.worker, partition, offset, epoch)

    async def leave(self) -> None:
        """Release this worker's leases at once (others may claim them immediately)."""
        await self.subs.get(self.sub_id, tenant=self.tenant)
        await self.subs.store.leave(self.sub_id, self.worker)
