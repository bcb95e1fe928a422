"""``Topology``: dispatch, filters, consumer groups and channels from an App's declarations,
without I/O (nothing here opens the store or the broker)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.subscribe import PredicateError
from reventless.topology import Topology, lease_group, static_group, static_share
from tests.model import Counter, Incremented, Reset


class Row(BaseModel):
    id: str
    n: int


def _app(**collector: object) -> rv.App:
    options = rv.AppOptions(partitions=4, collector=rv.CollectorOptions(**collector))  # type: ignore[arg-type]
    app = rv.App(store="sqlite://", options=options)
    app.event_log(Counter)
    app.topic("metrics", schema=pa.schema([("name", pa.string()), ("value", pa.int64())]))
    return app


def _model(name: str, *events: type[rv.Event], where: str | None = None) -> rv.ReadModel[Row]:
    m = rv.ReadModel(name, row=Row, key="id", where=where)

    @m.on(*events)
    def _row(ev: rv.Envelope[rv.Event], current: Row | None) -> rv.Upsert[Row]:
        return rv.Upsert(Row(id=str(ev.aggregate_id), n=1))

    return m


def test_dispatch_follows_the_handlers_and_the_owning_log() -> None:
    app = _app()
    both = _model("both", Incremented, Reset)

    @both.on_topic("metrics")
    def _metric(ev: rv.Envelope[rv.Event], current: Row | None) -> None:
        return None

    app.collect(both)
    app.collect(_model("resets", Reset))
    t = Topology.of(app)
    d = t.dispatch("both")
    assert list(d) == ["Counter", "metrics"]  # event handlers' topics first, then topics
    assert set(d["Counter"]) == {"Incremented", "Reset"} and set(d["metrics"]) == {"*"}
    assert d["Counter"]["Reset"] is both.handlers[Reset]
    assert t.dispatch("resets") == {"Counter": {"Reset": app.components["resets"].handlers[Reset]}}
    assert t.reads("both") == {"Counter": frozenset({"Incremented", "Reset"}), "metrics": None}
    assert t.wanted_types("resets") == {"Counter": frozenset({"Reset"})}
    assert t.wanted_types("both") == {}  # every type of Counter, and a schema topic
    assert t.filters("both") == {}
    d["Counter"].clear()  # a copy: the topology stays as built
    assert set(t.dispatch("both")["Counter"]) == {"Incremented", "Reset"}


def test_a_component_no_topic_serves_is_a_spec_error() -> None:
    class Stray(rv.Event):
        x: int = 0

    app = _app()
    app.collect(_model("stray", Stray))
    with pytest.raises(rv.SpecError, match="stray: handles Stray, but no EventLog"):
        Topology.of(app)
    app2 = _app()
    unknown = rv.SideEffectHandler("unknown")
    unknown.on_topic("nowhere")(lambda ev: None)
    app2.collect(unknown)
    with pytest.raises(rv.SpecError, match="handles unknown topic 'nowhere'"):
        Topology.of(app2)


def test_where_narrows_the_types_and_compiles_per_topic() -> None:
    app = _app()
    app.collect(_model("resets_only", Incremented, Reset, where="type = 'Reset'"))
    t = Topology.of(app)
    assert set(t.filters("resets_only")) == {"Counter"}
    assert t.reads("resets_only") == {"Counter": frozenset({"Reset"})}
    assert t.wanted_types("resets_only") == {"Counter": frozenset({"Reset"})}
    bad = _app()
    bad.collect(_model("bad", Reset, where="nope = 1"))
    with pytest.raises(PredicateError, match=r"bad \(topic 'Counter'\)"):
        Topology.of(bad)


def test_static_groups_and_their_channels() -> None:
    assert static_group("v", 1, 0) == "v" and static_group("v", 3, 2) == "v.m2of3"
    assert static_share(5, 2, 1) == [1, 3]
    app = _app(members=2, member=1)
    app.collect(_model("v", Incremented))
    t = Topology.of(app)
    assert t.group("v") == "v.m1of2" and t.groups("v") == ["v.m1of2"]
    channels = t.channels()
    assert channels.topics == {
        "Counter": (4, frozenset({"Incremented", "Reset"})),
        "metrics": (4, frozenset()),
    }
    assert [(c.group, c.partitions, c.topics) for c in channels.collectors] == [
        ("v.m0of2", frozenset({0, 2}), {"Counter": frozenset({"Incremented"})}),
        ("v.m1of2", frozenset({1, 3}), {"Counter": frozenset({"Incremented"})}),
    ]
    opts = rv.CollectorOptions(members=2, member=1)
    assert opts.static_group("v") == t.group("v") and opts.static_share(4) == [1, 3]


def test_leased_groups_one_per_partition() -> None:
    app = _app(group="leased")
    app.collect(_model("v", Incremented, Reset))
    t = Topology.of(app)
    want = [f"v.lease.Counter.{p}" for p in range(4)]
    assert t.groups("v") == want == [lease_group("v", "Counter", p) for p in range(4)]
    assert [(c.group, c.partitions) for c in t.channels().collectors] == [
        (g, frozenset({p})) for p, g in enumerate(want)
    ]


def test_dispatch_of_a_component_not_collected() -> None:
    app = _app()
    t = Topology.of(app)
    model = _model("later", Reset)
    assert t.dispatch_of(model) == {"Counter": {"Reset": model.handlers[Reset]}}
    assert t.channels().collectors == []


def test_build_takes_plain_declarations() -> None:
    app = _app()
    defs = {n: topic.definition for n, topic in app.topics.items()}
    model = _model("v", Reset)
    t = Topology.build(
        defs, {"Counter": Counter.event_classes}, {"v": model}, rv.CollectorOptions()
    )
    assert t.dispatch("v") == {"Counter": {"Reset": model.handlers[Reset]}}
    assert t.groups("v") == ["v"]
