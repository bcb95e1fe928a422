"""The data source's planning without a Spark session: options, offsets, admission control,
ranges per task and pushed filters turned into store predicates."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNotNull,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

import reventless as rv
from reventless.errors import ResnapshotRequiredError, SpecError
from reventless.predicate import Compare, InList, IsNull, Like, filter_columns
from reventless.predicate import Not as NotNode
from reventless.spark.ds_filter import Bounds, bounds_of, to_node
from reventless.spark.ds_plan import SourceOptions, capped, check_retained, plan
from tests.spark.model import Noted, Recorded

pytestmark = pytest.mark.spark

COLUMNS = filter_columns(rv.TopicSchema.from_events("Record", [Recorded, Noted]))


def opts(**more: str) -> SourceOptions:
    return SourceOptions.parse({"store": "sqlite:///x.db", "topic": "Record", **more})


def test_starting_and_ending_offsets() -> None:
    assert opts().starting(3, head=50, horizon=10) == {"0": 11, "1": 11, "2": 11}
    assert opts(startingOffsets="latest").starting(2, 50, 0) == {"0": 51, "1": 51}
    assert opts(startingOffsets="7").starting(2, 50, 0) == {"0": 7, "1": 7}
    assert opts(startingOffsets='{"1": 9}').starting(2, 50, 4) == {"1": 9, "0": 5}
    assert opts(endingOffsets='{"0": 20}').ending(2, 50, 0) == {"0": 20, "1": 51}
    assert opts().ending(1, 50, 0) == {"0": 51}
    for bad in ('{"2": 1}', '{"0": 0}', "soon", "0", '{"0": true}'):
        with pytest.raises(SpecError, match="startingOffsets"):
            opts(startingOffsets=bad).starting(2, 50, 0)
    with pytest.raises(SpecError, match="endingOffsets"):
        opts(endingOffsets="earliest").ending(1, 5, 0)


def test_options_are_checked() -> None:
    with pytest.raises(SpecError, match="option 'store'"):
        SourceOptions.parse({"topic": "t"})
    with pytest.raises(SpecError, match="option 'topic'"):
        SourceOptions.parse({"store": "sqlite:///x.db"})
    with pytest.raises(SpecError, match="option 'opened' is true or false"):
        opts(opened="maybe")
    with pytest.raises(SpecError, match="eventsPerPartition"):
        opts(eventsPerPartition="many")
    o = opts(OPENED="TRUE", maxEventsPerTrigger="5", where=" ")
    assert (o.opened, o.max_events_per_trigger, o.where) == (True, 5, None)


def test_admission_control_caps_a_batch_by_offsets() -> None:
    assert capped({"0": 1}, head=100, limit=None) == {"0": 101}
    assert capped({"0": 1}, head=100, limit=30) == {"0": 31}
    assert capped({"0": 95}, head=100, limit=30) == {"0": 101}
    assert capped({"0": 101}, head=100, limit=30) == {"0": 101}  # nothing new
    # partitions share the log's offsets: at most 30 events over all of them
    assert capped({"0": 10, "1": 50}, head=100, limit=30) == {"0": 40, "1": 50}


def test_retention_behind_a_start_needs_a_resnapshot() -> None:
    check_retained("T", {"0": 11, "1": 11}, head=50, horizon=10)
    check_retained("T", {"0": 1}, head=0, horizon=0)  # an empty topic
    with pytest.raises(ResnapshotRequiredError, match="partition 1 retains offsets after 10"):
        check_retained("T", {"0": 11, "1": 4}, head=50, horizon=10)


def test_ranges_per_task_and_per_topic_partition() -> None:
    assert plan({"0": 1}, {"0": 11}, partitioned=False, per_task=4) == [
        (None, 1, 4),
        (None, 5, 8),
        (None, 9, 10),
    ]
    assert plan({"0": 5}, {"0": 5}, partitioned=False, per_task=4) == []
    two = plan({"0": 1, "1": 1}, {"0": 11, "1": 11}, partitioned=True, per_task=4)
    assert two == [(0, 1, 8), (0, 9, 10), (1, 1, 8), (1, 9, 10)]
    pruned = plan(
        {"0": 1, "1": 1},
        {"0": 11, "1": 11},
        partitioned=True,
        per_task=4,
        bounds=Bounds(lo=3, hi=6, partitions=frozenset({1})),
    )
    assert pruned == [(1, 3, 6)]


def test_pushed_filters_become_predicates() -> None:
    f = COLUMNS
    assert to_node(EqualTo(("_type",), "Noted"), f) == Compare(f["_type"], "=", "Noted")
    assert to_node(GreaterThan(("_offset",), 10), f) == Compare(f["_offset"], ">", 10)
    assert to_node(In(("_partition",), (0, 2)), f) == InList(f["_partition"], (0, 2))
    assert to_node(IsNotNull(("text",)), f) == NotNode(IsNull(f["text"]))
    assert to_node(EqualNullSafe(("text",), None), f) == IsNull(f["text"])
    assert to_node(StringStartsWith(("text",), "50%_"), f) == Like(f["text"], "50\\%\\_%")
    assert to_node(Not(EqualTo(("ok",), True)), f) == NotNode(Compare(f["ok"], "=", True))
    at = datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert to_node(LessThanOrEqual(("_produced_at",), at), f) == Compare(
        f["_produced_at"], "<=", 1_000_000
    )
    kept = [
        EqualTo(("day",), "2024-01-01"),  # a date column: Spark's
        EqualTo(("home", "zip"), 1),  # nested
        GreaterThan(("ok",), False),  # booleans only compare for equality
        EqualTo(("ratio",), float("nan")),
        In(("_type",), ("Noted", None)),
        LessThanOrEqual(("_produced_at",), datetime(2024, 1, 1)),  # naive: TIMESTAMP_NTZ
        EqualTo(("_offset",), "1"),
    ]
    assert [to_node(k, f) for k in kept] == [None] * len(kept)


def test_offset_and_partition_bounds_of_pushed_predicates() -> None:
    f = COLUMNS
    nodes = [
        Compare(f["_offset"], ">", 4),
        Compare(f["_offset"], "<=", 9),
        InList(f["_partition"], (0, 1)),
        Compare(f["_partition"], "=", 1),
        Compare(f["_type"], "=", "Noted"),
    ]
    assert bounds_of(nodes) == Bounds(lo=5, hi=9, partitions=frozenset({1}))
