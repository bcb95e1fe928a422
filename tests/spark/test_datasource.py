"""The log as the ``reventless`` Spark data source: batch reads equal the store's rows, in
parallel tasks, with filters pushed to the store; streams read every offset exactly once
under admission control and across restarts from a checkpoint; clear errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import reventless as rv
from reventless.spark import from_spark
from reventless.subscribe import Retention
from tests.spark.model import Noted, Record, Recorded
from tests.spark.test_log import fill, store_rows

pytestmark = pytest.mark.spark


def source(spark: Any, url: str, topic: str, **options: object) -> Any:
    reader = spark.read.format("reventless").option("store", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def frame_rows(df: Any, schema: pa.Schema) -> pa.Table:
    table = df.toArrow().sort_by("_offset")
    return pa.Table.from_batches([from_spark(b, schema) for b in table.to_batches()], schema)


def scanned(df: Any) -> tuple[list[Any], int]:
    """Collect ``df``; also how many rows its scan handed to Spark (the scan's metric)."""
    rows = df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    counts = [
        int(leaves.apply(i).metrics().apply("numOutputRows").value()) for i in range(leaves.size())
    ]
    return rows, sum(counts)


def wait_for(check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


async def test_batch_read_equals_the_store_in_parallel_tasks(spark: Any, file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 20)
        want = await store_rows(log)
        df = source(spark, file_url, log.name, eventsPerPartition=7)
        assert df.rdd.getNumPartitions() == 6  # offsets 1..40 in ranges of 7
        assert frame_rows(df, log.arrow_schema).equals(want)
        part = source(spark, file_url, log.name, startingOffsets=5, endingOffsets=11)
        assert sorted(r._offset for r in part.select("_offset").collect()) == list(range(5, 11))


async def test_a_partitioned_topic_reads_by_partition(spark: Any, file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record, partitions=3)
    async with app:
        await fill(log, 0, 15)
        want = await store_rows(log)
        df = source(spark, file_url, log.name, eventsPerPartition=5)
        assert df.rdd.getNumPartitions() == 6  # per partition: offsets 1..30 by 15
        assert frame_rows(df, log.arrow_schema).equals(want)
        one, read = scanned(df.where("_partition = 1").select("_offset"))
        expect = want.filter(pc.equal(want["_partition"], 1))["_offset"].to_pylist()
        assert sorted(r._offset for r in one) == expect and read == len(expect)


async def test_filters_are_pushed_to_the_store(spark: Any, file_url: str) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 20)
        want = await store_rows(log)
        df = source(spark, file_url, log.name)
        q = df.where("_type = 'Noted' AND _offset > 10 AND text LIKE 'note 1%'")
        assert "Filter (" not in q._jdf.queryExecution().executedPlan().toString()  # all pushed
        rows, read = scanned(q)
        texts = want["text"].to_pylist()
        expect = [
            o
            for o, t in zip(want["_offset"].to_pylist(), texts, strict=True)
            if o > 10 and t is not None and t.startswith("note 1")
        ]
        assert sorted(r._offset for r in rows) == expect and read == len(expect) == 10
        rows, read = scanned(df.where("_type IN ('Recorded') AND ratio >= 1.0 AND NOT ok"))
        assert len(rows) == read == 7  # ratio = i / 7 >= 1 and i odd: i in 7, 9, ..., 19
        dated, read = scanned(df.where("day = DATE'2024-02-03'"))  # dates stay with Spark
        assert len(dated) == 1 and read == 40
        old, read = scanned(df.where("_produced_at < TIMESTAMP'2001-01-01 00:00:00Z'"))
        assert old == [] and read == 0
        narrowed = source(spark, file_url, log.name, where="type = 'Recorded' AND offset <= 9")
        assert sorted(r._offset for r in narrowed.collect()) == [1, 3, 5, 7, 9]


async def test_bad_input_is_a_clear_error(spark: Any, file_url: str) -> None:
    from pyspark.errors import AnalysisException

    app = rv.App(store=file_url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 2)
    with pytest.raises(Exception, match=r"TopicNotFoundError.*no topic 'Nope'.*Record"):
        source(spark, file_url, "Nope")
    with pytest.raises(Exception, match=r"PredicateError.*no filterable column 'nope'"):
        source(spark, file_url, log.name, where="nope = 1").collect()
    with pytest.raises(AnalysisException, match="nope"):
        source(spark, file_url, log.name).select("nope").collect()
    with pytest.raises(Exception, match=r"SpecError.*unknown option.*startoffset"):
        source(spark, file_url, log.name, startOffset=1)
    with pytest.raises(Exception, match=r"SpecError.*maxEventsPerTrigger"):
        source(spark, file_url, log.name, maxEventsPerTrigger=0)
    given = spark.read.format("reventless").schema("_offset long")
    with pytest.raises(Exception, match=r"SchemaMismatchError.*\.schema\(\) was given"):
        given.option("store", file_url).option("topic", log.name).load().collect()
    with pytest.raises(Exception, match=r"StoreError.*does not exist"):
        source(spark, f"sqlite:///{Path(file_url[10:]).parent / 'missing.db'}", "Record")


def stream(spark: Any, url: str, topic: str, checkpoint: Path, **options: object) -> list[pa.Table]:
    """Run a stream of ``topic`` to the head (Trigger.AvailableNow); its micro-batches."""
    reader = spark.readStream.format("reventless").option("store", url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    batches: list[pa.Table] = []
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, _: batches.append(df.toArrow()))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return batches


def offsets(batches: list[pa.Table]) -> list[int]:
    return [o for b in batches for o in b["_offset"].to_pylist()]


async def test_a_stream_reads_each_offset_once_capped_and_across_restarts(
    spark: Any, file_url: str, tmp_path: Path
) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    ck = tmp_path / "checkpoint"
    async with app:
        await fill(log, 0, 10)
        first = stream(spark, file_url, log.name, ck, maxEventsPerTrigger=7)
        assert [b.num_rows for b in first] == [7, 7, 6]
        await fill(log, 10, 6)  # the log grows while no query runs
        second = stream(spark, file_url, log.name, ck, maxEventsPerTrigger=7)
        assert [b.num_rows for b in second] == [7, 5]
        assert offsets(first + second) == list(range(1, 33))  # nothing skipped or doubled
        want = await store_rows(log)
        got = pa.Table.from_batches(
            [from_spark(b, log.arrow_schema) for t in first + second for b in t.to_batches()],
            log.arrow_schema,
        )
        assert got.equals(want)
        assert stream(spark, file_url, log.name, ck) == []  # at the head: no batch
        late = stream(spark, file_url, log.name, tmp_path / "late", startingOffsets="latest")
        assert offsets(late) == []  # from the head on


async def test_a_stream_behind_retention_needs_a_resnapshot(
    spark: Any, file_url: str, tmp_path: Path
) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    ck = tmp_path / "checkpoint"
    async with app:
        await fill(log, 0, 5)
        assert offsets(stream(spark, file_url, log.name, ck)) == list(range(1, 11))
        await fill(log, 5, 10)
        retention = Retention(app.store.db)  # type: ignore[attr-defined]
        await retention.open()
        await retention.set(log.name, max_count=5)
        assert await retention.apply() == {log.name: 25}  # offsets 1..25 are gone
    with pytest.raises(Exception, match=r"ResnapshotRequiredError.*after 25.*needs 11"):
        stream(spark, file_url, log.name, ck)
    fresh = stream(spark, file_url, log.name, tmp_path / "fresh")  # earliest: after 25
    assert offsets(fresh) == list(range(26, 31))
    with pytest.raises(Exception, match="ResnapshotRequiredError"):
        source(spark, file_url, log.name, startingOffsets=3).collect()


class Relabelled(rv.Event):
    label: str


class Wider(rv.Aggregate):
    """``Record`` with a new event type: its topic gains a column."""

    events = Recorded | Noted | Relabelled

    @rv.applies(Recorded)
    def _r(self, e: Recorded) -> None:
        pass

    @rv.applies(Noted)
    def _n(self, e: Noted) -> None:
        pass

    @rv.applies(Relabelled)
    def _new(self, e: Relabelled) -> None:
        pass


async def test_a_schema_change_mid_stream_fails_it_and_a_restart_reads_on(
    spark: Any, file_url: str, tmp_path: Path
) -> None:
    app = rv.App(store=file_url)
    log = app.event_log(Record)
    ck = tmp_path / "checkpoint"
    seen: list[pa.Table] = []
    async with app:
        await fill(log, 0, 3)
        df = spark.readStream.format("reventless").option("store", file_url)
        df = df.option("topic", log.name).load()
        query = (
            df.writeStream.foreachBatch(lambda d, _: seen.append(d.toArrow()))
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_for(lambda: len(offsets(seen)) == 6)
            wider = rv.App(store=file_url)
            wlog = wider.event_log(Wider, topic=log.name)
            async with wider:
                await wlog.append("w-1", [Relabelled(label="new")], expected_version=0)
            wait_for(lambda: not query.isActive)
        finally:
            query.stop()
        error = query.exception()
        assert error is not None and "changed its stored schema" in str(error)
    rest = stream(spark, file_url, log.name, ck)
    assert offsets(seen + rest) == list(range(1, 8))
    assert rest[-1]["label"].to_pylist()[-1] == "new"


@pytest.mark.postgres
async def test_batch_and_stream_on_postgres(spark: Any, pg_url: str, tmp_path: Path) -> None:
    app = rv.App(store=pg_url)
    log = app.event_log(Record, partitions=2)
    async with app:
        await fill(log, 0, 10)
        want = await store_rows(log)
        df = source(spark, pg_url, log.name, eventsPerPartition=4)
        assert df.rdd.getNumPartitions() == 6  # 2 topic partitions x offsets 1..20 by 8
        assert frame_rows(df, log.arrow_schema).equals(want)
        noted, read = scanned(df.where("_type = 'Noted'"))
        assert len(noted) == read == 10
        batches = stream(spark, pg_url, log.name, tmp_path / "ck", maxEventsPerTrigger=8)
        assert [b.num_rows for b in batches] == [8, 8, 4]
        assert sorted(offsets(batches)) == list(range(1, 21))


async def test_personal_fields_are_sealed_unless_opened(
    spark: Any, file_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reventless.spark import register
    from reventless.store.keys import MasterKey, is_sealed
    from tests.spark.personalmodel import Customer, register_all

    monkeypatch.setenv("REVENTLESS_MASTER_KEY", MasterKey.generate().text)
    app = rv.App(store=file_url)
    log = app.event_log(Customer)
    async with app:
        await register_all(log)
        want = pa.Table.from_batches([b async for b in log.read_batches()], log.arrow_schema)
    register(spark)  # with the master key of this process
    sealed = source(spark, file_url, log.name).select("name").collect()
    assert sealed and all(is_sealed(r.name) for r in sealed)
    opened = frame_rows(source(spark, file_url, log.name, opened=True), log.arrow_schema)
    assert opened.equals(want)


async def test_a_dcb_log_reads_with_its_tags(spark: Any, file_url: str) -> None:
    from tests.spark.dcbmodel import CourseDefined, StudentSubscribed

    app = rv.App(store=file_url)
    log = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)
    async with app:
        await log.append([CourseDefined(course_id="c1", capacity=3)])
        for i in range(4):
            await log.append(
                [StudentSubscribed(course_id="c1", student_id=f"s{i}")],
                tags=["term:2026"] if i % 2 else None,
            )
        want = pa.Table.from_batches([b async for b in log.topic.read_batches()])
    df = source(spark, file_url, "courses", where="tag = 'term:2026'")
    got = frame_rows(df, log.topic.arrow_schema)
    assert got.column("_tags").to_pylist() == [
        t for t in want.column("_tags").to_pylist() if "term:2026" in t
    ]
    assert got.column("_tags").to_pylist()[0] == ["course:c1", "student:s1", "term:2026"]
