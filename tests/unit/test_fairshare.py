"""The one fair-share lease algorithm, in both of its modes (collector groups and
subscription groups), driven directly on SQLite with a simulated clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reventless.store import subscription_tables, tables
from reventless.store.database import Database
from reventless.store.fairshare import (
    COLLECTOR_LEASES,
    SUBSCRIPTION_LEASES,
    LeaseTables,
    Part,
    fair_share,
    heartbeat,
    leave,
    release,
)

TTL = 10.0
WORKERS = ["w0", "w1", "w2", "w3"]


@dataclass(frozen=True)
class Mode:
    """One caller of the algorithm: its lease tables, a group and the topics it reads."""

    name: str
    spec: LeaseTables
    scope: tuple[str, ...]
    topics: dict[str, int]
    defaults: dict[str, int] = field(default_factory=dict)

    @property
    def parts(self) -> list[Part]:
        return [(t, p) for t, n in self.topics.items() for p in range(n)]


MODES = [
    Mode("collector", COLLECTOR_LEASES, ("comp",), {"A": 4, "B": 3}),
    Mode("subscription", SUBSCRIPTION_LEASES, ("sub-1",), {"T": 5}, {"acked": 7}),
]


@pytest.fixture(scope="module")
def db() -> Iterator[Database]:
    database = Database("sqlite://")
    database.open_sync()
    database.write_sync(tables.metadata.create_all)
    database.write_sync(subscription_tables.metadata.create_all)
    yield database
    database.writer_engine.dispose()


class Group:
    """Members of one group against a store, on a clock the test moves. Checks after
    every step that no partition has two members believing they hold it, and that a
    partition's epoch never falls and grows whenever its owner changes."""

    def __init__(self, db: Database, mode: Mode) -> None:
        self.db, self.mode = db, mode
        self.now = 1000.0
        self.beliefs: dict[str, tuple[dict[Part, int], float]] = {}
        self.alive: set[str] = set()
        #: The last owner of each partition (never None once owned) and its epoch.
        self.seen: dict[Part, tuple[str | None, int]] = {}
        spec = mode.spec
        db.write_sync(lambda c: c.execute(spec.leases.delete()))
        db.write_sync(lambda c: c.execute(spec.members.delete()))

    def beat(self, worker: str) -> None:
        """One heartbeat; a collector member then gives back what exceeds its share."""
        m = self.mode
        grant = self.db.write_sync(
            lambda c: heartbeat(
                c, m.spec, m.scope, worker, m.topics, TTL, now=self.now, defaults=m.defaults
            )
        )
        assert grant.now == self.now and grant.expires_at == self.now + TTL
        assert list(grant.members) == sorted(grant.members) and worker in grant.members
        if m.spec.release_excess:
            assert grant.excess == {}
        self.beliefs[worker] = ({**grant.held, **grant.excess}, grant.expires_at)
        self.check()
        self.db.write_sync(lambda c: release(c, m.spec, m.scope, worker, grant.excess))
        self.beliefs[worker] = (dict(grant.held), grant.expires_at)
        self.alive.add(worker)
        self.check()

    def leave(self, worker: str) -> None:
        m = self.mode
        self.db.write_sync(lambda c: leave(c, m.spec, m.scope, worker))
        self.beliefs.pop(worker, None)
        self.alive.discard(worker)
        self.check()

    def rows(self) -> dict[Part, tuple[str | None, int]]:
        m, t = self.mode, self.mode.spec.leases
        rows = self.db.write_sync(lambda c: c.execute(t.select()).all())
        topic = next(iter(m.topics))
        return {(r.topic if m.spec.topic else topic, r.partition): (r.owner, r.epoch) for r in rows}

    def check(self) -> None:
        for key in self.mode.parts:
            believing = [
                w for w, (held, until) in self.beliefs.items() if key in held and until > self.now
            ]
            assert len(believing) <= 1, (key, believing)
        for key, (owner, epoch) in self.rows().items():
            last_owner, last_epoch = self.seen.get(key, (None, 0))
            assert epoch >= last_epoch, (key, epoch, last_epoch)
            if owner is not None and last_owner is not None and owner != last_owner:
                assert epoch > last_epoch, (key, owner, last_owner, epoch)
            if owner is not None:
                self.seen[key] = (owner, epoch)
        for w, (held, _) in self.beliefs.items():  # a grant names the epoch it holds at
            rows = self.rows()
            for key, epoch in held.items():
                assert rows[key][1] >= epoch
                if rows[key][0] == w:
                    assert rows[key][1] == epoch, (w, key)


step = st.one_of(
    st.tuples(st.just("beat"), st.sampled_from(WORKERS)),
    st.tuples(st.just("pause"), st.sampled_from(WORKERS)),  # stops beating, still believes
    st.tuples(st.just("leave"), st.sampled_from(WORKERS)),
    st.tuples(st.just("tick"), st.floats(0.5, 2 * TTL)),
)


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(step, max_size=30))
def test_no_partition_has_two_holders_and_shares_converge(
    db: Database, mode: Mode, steps: list[tuple[str, object]]
) -> None:
    group = Group(db, mode)
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
    owners = {k: owner for k, (owner, _) in group.rows().items()}
    assert {owners[k] for k in mode.parts} <= set(members)  # all owned, by the living
    for topic, n in mode.topics.items():
        for w in members:
            mine = {k for k in mode.parts if k[0] == topic and owners[k] == w}
            assert len(mine) == fair_share(n, members, w)
            assert mine == {k for k in group.beliefs[w][0] if k[0] == topic}


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_an_expired_lease_is_renewed_or_claimed_anew_by_mode(db: Database, mode: Mode) -> None:
    group = Group(db, mode)
    group.beat("w0")
    key = mode.parts[0]
    first = group.beliefs["w0"][0][key]
    group.now += TTL + 1  # nobody claimed it meanwhile
    group.beat("w0")
    again = group.beliefs["w0"][0][key]
    # a collector keeps its epoch (its checkpoint commits stay valid); a subscription
    # worker claims the partition at the next epoch (acks at the old one are refused)
    assert again == (first if mode.spec.renew_expired else first + 1)


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_excess_is_released_or_reported_by_mode(db: Database, mode: Mode) -> None:
    group = Group(db, mode)
    m = mode
    held = db.write_sync(
        lambda c: heartbeat(
            c, m.spec, m.scope, "w1", m.topics, TTL, now=group.now, defaults=m.defaults
        )
    )
    assert set(held.held) == set(m.parts)
    db.write_sync(  # w0 joins; its first heartbeat finds nothing free
        lambda c: heartbeat(
            c, m.spec, m.scope, "w0", m.topics, TTL, now=group.now, defaults=m.defaults
        )
    )
    second = db.write_sync(
        lambda c: heartbeat(
            c, m.spec, m.scope, "w1", m.topics, TTL, now=group.now, defaults=m.defaults
        )
    )
    live = ("w0", "w1")
    assert second.members == live
    fair = {t: fair_share(n, live, "w1") for t, n in m.topics.items()}
    for t in m.topics:
        assert len([k for k in second.held if k[0] == t]) == fair[t]
    owned = {k for k, (owner, _) in group.rows().items() if owner == "w1"}
    if m.spec.release_excess:
        assert second.excess == {} and owned == set(second.held)
    else:
        assert set(second.excess) == set(m.parts) - set(second.held)
        assert owned == set(m.parts)  # still w1's until it gives them back


def test_new_subscription_lease_rows_start_at_the_given_defaults(db: Database) -> None:
    m = MODES[1]
    Group(db, m)
    db.write_sync(
        lambda c: heartbeat(c, m.spec, m.scope, "w0", m.topics, TTL, now=1.0, defaults={"acked": 7})
    )
    t = subscription_tables.partitions
    acked = db.write_sync(lambda c: {r.acked for r in c.execute(t.select())})
    assert acked == {7}


def test_fair_shares_add_up_and_favour_the_first_by_name() -> None:
    members = ["a", "b", "c"]
    assert [fair_share(4, members, m) for m in members] == [2, 1, 1]
    assert fair_share(4, [], "a") == 4
    for n in range(10):
        assert sum(fair_share(n, members, m) for m in members) == n
