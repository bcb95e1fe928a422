"""The lease table of leased collector groups, driven directly with a simulated clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from reventless.store import tables
from reventless.store.database import Database
from reventless.store.leases import (
    Part,
    fair_share,
    heartbeat_sync,
    holds_sync,
    leave_sync,
    release_sync,
)

TOPICS = {"A": 4, "B": 3}
PARTS = [(t, p) for t, n in TOPICS.items() for p in range(n)]
TTL = 10.0
WORKERS = ["w0", "w1", "w2", "w3"]


@pytest.fixture
def db() -> Iterator[Database]:
    database = Database("sqlite://")
    database.open_sync()
    database.write_sync(tables.metadata.create_all)
    yield database
    database.writer_engine.dispose()


class Group:
    """Members of one component's group against a store, on a clock the test moves."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.now = 1000.0
        #: What each member believes it holds (partition -> epoch) and until when.
        self.beliefs: dict[str, tuple[dict[Part, int], float]] = {}
        self.alive: set[str] = set()

    def beat(self, worker: str) -> None:
        """One heartbeat; the member then stops and gives back what exceeds its share."""
        grant = self.db.write_sync(
            lambda c: heartbeat_sync(c, "comp", worker, TOPICS, TTL, now=self.now)
        )
        self.db.write_sync(lambda c: release_sync(c, "comp", worker, grant.excess))
        self.beliefs[worker] = (dict(grant.held), grant.expires_at)
        self.alive.add(worker)

    def leave(self, worker: str) -> None:
        self.db.write_sync(lambda c: leave_sync(c, "comp", worker))
        self.beliefs.pop(worker, None)
        self.alive.discard(worker)

    def holds(self, worker: str, key: Part, epoch: int) -> bool:
        return self.db.write_sync(lambda c: holds_sync(self.db, c, "comp", worker, key, epoch))

    def owners(self) -> dict[Part, str | None]:
        t = tables.collector_leases
        rows = self.db.write_sync(
            lambda c: c.execute(t.select().where(t.c.component == "comp")).all()
        )
        return {(r.topic, r.partition): r.owner for r in rows}

    def check(self) -> None:
        """No partition has two members that may run it: by their unexpired beliefs, or
        by the commit fence."""
        for key in PARTS:
            believing = [
                w for w, (held, until) in self.beliefs.items() if key in held and until > self.now
            ]
            assert len(believing) <= 1, (key, believing)
            passing = [
                w
                for w, (held, _) in self.beliefs.items()
                if key in held and self.holds(w, key, held[key])
            ]
            assert len(passing) <= 1, (key, passing)


step = st.one_of(
    st.tuples(st.just("beat"), st.sampled_from(WORKERS)),
    st.tuples(st.just("pause"), st.sampled_from(WORKERS)),  # stops beating, still believes
    st.tuples(st.just("leave"), st.sampled_from(WORKERS)),
    st.tuples(st.just("tick"), st.floats(0.5, 2 * TTL)),
)


@settings(max_examples=150)
@given(st.lists(step, max_size=40))
def test_random_joins_pauses_leaves_and_expiries_never_give_a_partition_two_holders(
    db: Database, steps: list[tuple[str, object]]
) -> None:
    db.write_sync(lambda c: c.execute(tables.collector_leases.delete()))
    db.write_sync(lambda c: c.execute(tables.collector_members.delete()))
    group = Group(db)
    for op, arg in steps:
        if op == "beat":
            group.beat(str(arg))
        elif op == "pause":
            group.alive.discard(str(arg))
        elif op == "leave" and arg in group.alive:
            group.leave(str(arg))
        elif op == "tick":
            assert isinstance(arg, float)
            group.now += arg
        group.check()
    if not group.alive:
        return
    # Paused members' leases run out; the live ones settle on their fair shares.
    group.now += TTL + 1
    members = sorted(group.alive)
    for _ in range(4):
        for w in members:
            group.beat(w)
            group.check()
    owners = group.owners()
    assert {owners[k] for k in PARTS} <= set(members)  # every partition owned, by the living
    for topic, n in TOPICS.items():
        for w in members:
            mine = [k for k in PARTS if k[0] == topic and owners[k] == w]
            assert len(mine) == fair_share(n, members, w)
            assert set(mine) == {k for k in group.beliefs[w][0] if k[0] == topic}


def test_fair_shares_add_up_and_favour_the_first_by_name() -> None:
    members = ["a", "b", "c"]
    assert [fair_share(4, members, m) for m in members] == [2, 1, 1]
    assert [fair_share(2, members, m) for m in members] == [1, 1, 0]
    assert fair_share(4, [], "a") == 4  # not yet registered: claims what is free
    for n in range(10):
        assert sum(fair_share(n, members, m) for m in members) == n


def test_a_claim_bumps_the_epoch_and_fences_the_previous_holder(db: Database) -> None:
    group = Group(db)
    group.beat("w0")
    old = group.beliefs["w0"][0][("A", 0)]
    assert group.holds("w0", ("A", 0), old)
    group.now += TTL + 1  # w0 paused past its lease
    group.beat("w1")
    new = group.beliefs["w1"][0][("A", 0)]
    assert new == old + 1
    assert not group.holds("w0", ("A", 0), old)
    assert group.holds("w1", ("A", 0), new)
    group.beat("w0")  # back: the member row is live again, the partitions are w1's
    assert ("A", 0) not in group.beliefs["w0"][0]


def test_a_leave_frees_partitions_at_once(db: Database) -> None:
    group = Group(db)
    group.beat("w0")
    group.beat("w1")
    assert group.beliefs["w1"][0] == {}  # all held by w0, unexpired
    group.leave("w0")
    group.beat("w1")
    assert set(group.beliefs["w1"][0]) == set(PARTS)


def test_leased_options_are_checked_up_front() -> None:
    opts = rv.CollectorOptions(group="leased", lease_ttl=9.0)
    assert opts.heartbeat_interval == 3.0
    with pytest.raises(rv.SpecError, match="static"):
        rv.CollectorOptions(group="leased", members=2, member=1)
    with pytest.raises(rv.SpecError, match="heartbeat"):
        rv.CollectorOptions(group="leased", lease_ttl=1.0, heartbeat=1.0)
    with pytest.raises(rv.SpecError, match="lease_ttl"):
        rv.CollectorOptions(group="leased", lease_ttl=0.0)
    with pytest.raises(rv.SpecError, match="group"):
        rv.CollectorOptions(group="dynamic")  # type: ignore[arg-type]
    with pytest.raises(rv.SpecError, match="worker"):
        rv.CollectorOptions(group="leased", worker="")
    with pytest.raises(rv.SpecError, match=r"member must be 0\.\.1"):
        rv.CollectorOptions(members=2, member=2)
