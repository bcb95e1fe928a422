"""Collector groups: processes running one collector share its topic partitions.

A static member owns a fixed share (``CollectorOptions.static_share``; the collector runs
it from ``start``). A leased member is a ``LeasedGroup``, which drives the collector
through its public partition API (``acquire``, ``release``, ``catch_up``, ``subscribe``)
as leases come and go; the lease table lives behind the store's ``LeaseStore``.

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
the partition at its epoch (the fence of ``CollectorStore.commit``); if not, the
transaction rolls back with ``LeaseLostError`` and the partition is dropped here. A paused
or slow ex-owner can therefore never land anything after its partition was taken over.

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
from typing import TYPE_CHECKING

from .. import telemetry
from ..broker import Subscription
from ..errors import LeaseLostError
from ..store.leases import Grant, Part
from .options import CollectorOptions

if TYPE_CHECKING:
    from .collector import Collector

log = logging.getLogger("reventless.collect")


def default_worker() -> str:
    """A worker id unique among live processes: ``hostname-pid-random``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def group_name(component: str, topic: str, partition: int) -> str:
    """The broker consumer group of one leased partition: every process that owns the
    partition in turn subscribes with it (on NATS: one durable consumer per partition)."""
    return f"{component}.lease.{topic}.{partition}"


class LeasedGroup:
    """This process's membership in a collector's leased group: a heartbeat task that
    renews and claims leases, and a task that applies what the heartbeats granted to the
    collector (gain: acquire, subscribe, catch up; loss: release, unsubscribe)."""

    def __init__(self, collector: Collector, options: CollectorOptions) -> None:
        self.collector = collector
        self.leases = collector.store.leases
        self.component = collector.name
        self.worker = options.worker or default_worker()
        self.ttl, self.interval = options.lease_ttl, options.heartbeat_interval
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
        collector.on_fenced = self._fenced

    @property
    def epochs(self) -> dict[Part, int]:
        """The partitions this process runs, with the epoch it holds them at."""
        return self.collector.epochs

    @property
    def _partitions(self) -> dict[str, int]:
        return {n: t.partitions for n, t in self.collector.topics.items()}

    async def start(self) -> None:
        """Join the group, take up the partitions granted and catch them up, then keep
        heartbeating in the background."""
        loop = asyncio.get_running_loop()
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
            await self.leases.leave(self.component, self.worker)
        except Exception as exc:  # they expire after lease_ttl instead
            log.warning("collector %s: could not give back its leases: %s", self.component, exc)

    def _fenced(self, key: Part, epoch: int) -> None:
        """A commit of ``key`` at ``epoch`` found the lease taken over: stop the partition
        (at the next apply), unless it was re-acquired meanwhile."""
        if self.epochs.get(key) != epoch:
            return
        log.warning(
            "collector %s: partition %s/%d was taken over (epoch %d is stale): stopping it",
            self.component,
            key[0],
            key[1],
            epoch,
            extra=telemetry.fields(self.component, topic=key[0], partition=key[1]),
        )
        for granted in (self._held, self._excess):
            if granted.get(key) == epoch:
                del granted[key]
        self._changed.set()

    # -- heartbeats --------------------------------------------------------------------------

    async def _heartbeat(self) -> Grant:
        return await self.leases.heartbeat(self.component, self.worker, self._partitions, self.ttl)

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
                    extra=telemetry.fields(self.component),
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
            await self.leases.release(self.component, self.worker, give)
            for k in give:
                self._excess.pop(k, None)
            log.info(
                "collector %s: gave back %s (rebalance)",
                self.component,
                sorted(give),
                extra=telemetry.fields(self.component),
            )
        for key, epoch in list(self._held.items()):
            if key not in self.epochs:
                await self._gain(key, epoch)
        for key in [k for k in self.epochs if k not in self._subs]:
            await self._subscribe(key)  # a broker that was down at the gain

    async def _gain(self, key: Part, epoch: int) -> None:
        c = self.collector
        cp = await c.acquire(*key, epoch=epoch)
        log.info(
            "collector %s: took partition %s/%d (epoch %d) at offset %d",
            c.name,
            key[0],
            key[1],
            epoch,
            cp,
            extra=telemetry.fields(c.name, topic=key[0], partition=key[1], offset=cp),
        )
        await self._subscribe(key)
        task = asyncio.get_running_loop().create_task(self._catch_up(key, epoch))
        self._catching_up.add(task)
        task.add_done_callback(self._catching_up.discard)

    async def _subscribe(self, key: Part) -> None:
        c = self.collector
        topic, partition = key
        try:
            self._subs[key] = await c.subscribe(
                group_name(c.name, topic, partition), [topic], [partition]
            )
        except Exception as exc:  # the store poll covers the partition meanwhile
            log.warning("collector %s: cannot subscribe %s/%d: %s", c.name, topic, partition, exc)

    async def _catch_up(self, key: Part, epoch: int) -> None:
        c = self.collector
        try:
            await c.catch_up(*key, epoch=epoch)
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
        await c.release(keys)
        # after the release: a handler waiting for the lock returns (not ours any more)
        for key in keys:
            sub = self._subs.pop(key, None)
            if sub is not None:
                try:
                    await sub.close()
                except Exception as exc:
                    log.warning("collector %s: closing %s/%d: %s", c.name, *key, exc)
        log.info("collector %s: stopped %s", c.name, sorted(keys), extra=telemetry.fields(c.name))
