"""End-to-end conformance of a broker inside an App: subclass and provide ``make_broker``.

``make_broker()`` returns what ``rv.App(broker=...)`` takes; every call in one test must
reach the same broker (a shared in-memory instance, or one server URL), so that several
Apps of a test talk to each other through it. Collectors' store polls are pushed far
out: what they process came through the broker (or their start-up catch-up).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import reventless as rv
from reventless.broker import Broker
from reventless.store import require_sql


class Seen(BaseModel):
    """Per aggregate: events seen, in order, and by which group member."""

    id: str
    events: int
    member: int


class Inc(rv.Event):
    """The suite's only event."""

    by: int = 1


class Add(rv.Command):
    """The suite's only command."""

    by: int = 1


class Tally(rv.Aggregate):
    """A counter aggregate."""

    events = Inc
    value: int = 0

    @rv.handles(Add)
    def add(self, cmd: Add) -> Inc:
        return Inc(by=cmd.by)

    @rv.applies(Inc)
    def _inc(self, e: Inc) -> None:
        self.value += e.by


def ordered(member: int = 0, poison: set[str] | None = None) -> rv.ReadModel[Seen]:
    """Counts events per aggregate; an out-of-order event, or one of ``poison``, fails."""
    model = rv.ReadModel("seen", row=Seen, key="id")

    @model.on(Inc)
    def _seen(ev: rv.Envelope[Inc], current: Seen | None) -> rv.Upsert[Seen]:
        assert ev.aggregate_id is not None
        if poison and ev.aggregate_id in poison:
            raise ValueError(f"poison {ev.aggregate_id}")
        seen = current.events if current else 0
        if ev.version != seen + 1:
            raise ValueError(f"{ev.aggregate_id}: version {ev.version} after {seen}")
        return rv.Upsert(Seen(id=ev.aggregate_id, events=seen + 1, member=member))

    return model


class BrokerAppConformance:
    """What every broker must give an App. Subclasses provide ``make_broker``."""

    def make_broker(self) -> Callable[[], str | Broker]:  # pragma: no cover - overridden
        raise NotImplementedError

    def app(self, store: str, broker: str | Broker, **collector: Any) -> rv.App:
        options = rv.AppOptions(
            partitions=4,
            collector=rv.CollectorOptions(poll_interval=60.0, grace=60.0, **collector),
        )
        app = rv.App(store=store, broker=broker, options=options)
        app.event_log(Tally)
        return app

    async def test_events_reach_a_read_model_in_order(
        self, tmp_path: Path, make_broker: Callable[[], str | Broker]
    ) -> None:
        app = self.app(f"sqlite:///{tmp_path / 's.db'}", make_broker())
        view = app.collect(ordered())
        async with app:
            log = app.log_for(Tally)
            await log.execute_many([(f"t-{i % 9}", Add()) for i in range(300)])
            await app.settle(timeout=30)
            assert sorted((r.id, r.events) for r in await view.all()) == [
                (f"t-{i}", 34 if i < 3 else 33) for i in range(9)
            ]
            assert await app.dead_letters() == []

    async def test_poison_is_dead_lettered_and_the_rest_flows(
        self, tmp_path: Path, make_broker: Callable[[], str | Broker]
    ) -> None:
        poison = {"bad"}
        app = self.app(f"sqlite:///{tmp_path / 's.db'}", make_broker())
        view = app.collect(ordered(poison=poison))
        async with app:
            log = app.log_for(Tally)
            for agg in ("a", "bad", "b", "bad", "a"):
                await log.execute(agg, Add())
            await app.settle(timeout=30)
            letters = await view.dead_letters()
            assert [(d.aggregate_id, d.offset) for d in letters] == [("bad", 2), ("bad", 4)]
            assert {r.id: r.events for r in await view.all()} == {"a": 2, "b": 1}
            poison.clear()  # the bug is fixed: redrive in order
            assert await view.redrive() == rv.RedriveReport(redriven=2, still_parked=0)
            assert (await view.get("bad")) == Seen(id="bad", events=2, member=0)

    async def test_a_restarted_collector_catches_up(
        self, tmp_path: Path, make_broker: Callable[[], str | Broker]
    ) -> None:
        store = f"sqlite:///{tmp_path / 's.db'}"
        writer = self.app(store, make_broker())
        async with writer:
            log = writer.log_for(Tally)
            await log.execute_many([(f"r-{i % 4}", Add()) for i in range(40)])
            reader = self.app(store, make_broker())
            view = reader.collect(ordered())
            async with reader:  # missed all of it: catches up on start
                await reader.settle(timeout=30)
                assert sum(r.events for r in await view.all()) == 40
                await log.execute_many([(f"r-{i % 4}", Add()) for i in range(20)])
                await reader.settle(timeout=30)
                assert sum(r.events for r in await view.all()) == 60

    async def test_group_members_share_partitions_in_order(
        self, tmp_path: Path, make_broker: Callable[[], str | Broker]
    ) -> None:
        store = f"sqlite:///{tmp_path / 's.db'}"
        writer = self.app(store, make_broker())
        members = [self.app(store, make_broker(), members=2, member=m) for m in (0, 1)]
        for m, app in enumerate(members):
            app.collect(ordered(member=m))
        async with writer, members[0], members[1]:
            log = writer.log_for(Tally)
            await log.execute_many([(f"g-{i % 16}", Add()) for i in range(320)])
            for app in members:
                await app.settle(timeout=30)
            rows = await require_sql(writer.store, "this test").db.read(
                lambda c: list(c.exec_driver_sql("SELECT id, events, member FROM rm_seen"))
            )
            assert {r[0]: r[1] for r in rows} == {f"g-{i}": 20 for i in range(16)}
            assert all(member == rv.partition_of(agg, 4) % 2 for agg, _, member in rows)
            assert await writer.dead_letters() == []
