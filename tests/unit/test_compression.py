"""Per-topic compression of broker payloads (``compression=``): what goes on the wire,
what decodes, what is refused, and the Parquet codec of exports.

The in-app tests run collectors that never poll the store (``poll_interval`` and
``grace`` of a minute): what they see came through the broker, decoded from the payloads
the relay compressed."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import reventless as rv
from reventless.codec import TopicSchema
from reventless.codec.ipc import Compression, decode_batch, encode_batch
from reventless.relay import message_for, messages_for
from reventless.spec import Metadata
from reventless.store.append import StoredRow
from reventless.topicdef import TopicDef, row_context, stored_rows
from tests.model import Counter, Increment

ZSTD, LZ4, IPC = b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18", b"\xff\xff\xff\xff"
LIVE_ONLY = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=60, grace=60))


class Documented(rv.Event):
    doc: str
    n: int


class Archive(rv.Aggregate):
    events = Documented

    @rv.applies(Documented)
    def _documented(self, e: Documented) -> None:
        pass


def document(i: int) -> str:
    """About 2 KiB of JSON, as repetitive as real documents are."""
    lines = [
        {"sku": f"SKU-{(i * 7 + j) % 300:04d}", "qty": j, "price": 9.99 + j} for j in range(40)
    ]
    return json.dumps({"order": i, "lines": lines})


def rows_of(definition: TopicDef, events: Sequence[Documented]) -> list[StoredRow]:
    """Stored rows of ``events`` (offsets from 1), as the relay reads them."""
    encode = definition.schema.encoder("Documented")
    entries = [("a-1", i + 1, "Documented", 1, 0, encode(e)) for i, e in enumerate(events)]
    ids = [f"id-{i}" for i in range(len(events))]
    rows = stored_rows(1, ids, row_context(Metadata(), None, None), entries)
    return [(i + 1, *row) for i, row in enumerate(rows)]


def archive_def(compression: Compression) -> TopicDef:
    schema = TopicSchema.from_events("Archive", [Documented])
    return TopicDef("Archive", schema, "aggregate", compression=compression)


# -- the payload ---------------------------------------------------------------------------


def test_a_large_repetitive_page_is_much_smaller_on_the_wire() -> None:
    events = [Documented(doc=document(i), n=i) for i in range(200)]
    size = {}
    for c in ("none", "lz4", "zstd"):
        definition = archive_def(c)
        msg = message_for(definition, 0, rows_of(definition, events), 0)
        size[c] = len(msg.data)
        assert decode_batch(msg.data).column("doc").to_pylist() == [e.doc for e in events]
    assert size["none"] > 200 * 2000, size
    assert size["lz4"] * 4 < size["none"]
    assert size["zstd"] * 10 < size["none"]


def test_a_size_limited_broker_gets_fewer_messages_each_within_its_limit() -> None:
    """The relay splits a page by the size of the payload it would send: compressed, so
    more events fit in one message of a broker with a limit (SNS/SQS: 256 KiB)."""
    events = [Documented(doc=document(i), n=i) for i in range(300)]
    limit = 64 * 1024
    count = {}
    for c in ("none", "zstd"):
        definition = archive_def(c)
        msgs = messages_for(definition, rows_of(definition, events), {}, limit)
        assert all(len(m.data) <= limit for m in msgs)
        offsets = [o for m in msgs for o in decode_batch(m.data).column("_offset").to_pylist()]
        assert offsets == list(range(1, 301))
        count[c] = len(msgs)
    assert count["zstd"] * 4 <= count["none"], count


def test_each_codec_writes_its_standard_frame_and_none_writes_plain_ipc() -> None:
    events = [Documented(doc=document(1), n=1)]
    expected: list[tuple[Compression, bytes]] = [("none", IPC), ("lz4", LZ4), ("zstd", ZSTD)]
    for c, magic in expected:
        definition = archive_def(c)
        assert message_for(definition, 0, rows_of(definition, events), 0).data[:4] == magic


def test_a_payload_decodes_whatever_the_topic_says_now() -> None:
    """``decode_batch`` reads the payload's own first bytes: a consumer decodes what any
    producer sent, before or after a change of the topic's setting."""
    definition = archive_def("none")
    batch = definition.schema.to_arrow(rows_of(definition, [Documented(doc="x" * 5000, n=7)]))
    payloads = [encode_batch(batch, c) for c in ("none", "lz4", "zstd")]
    # Arrow's own per-buffer IPC compression (another producer's choice) decodes too
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    payloads.append(sink.getvalue().to_pybytes())
    assert len({p[:4] for p in payloads}) == 3  # plain and buffer-compressed IPC share a start
    for p in payloads:
        assert decode_batch(p).to_batches()[0].equals(batch)


def test_a_frame_that_would_not_be_smaller_is_not_sent() -> None:
    noise = pa.record_batch({"b": pa.array([os.urandom(64 * 1024)], pa.binary())})
    for c in ("lz4", "zstd"):
        data = encode_batch(noise, c)
        assert data == encode_batch(noise) and data[:4] == IPC
        assert decode_batch(data).to_batches()[0].equals(noise)


# -- declaring -----------------------------------------------------------------------------


def test_every_kind_of_topic_takes_the_option() -> None:
    app = rv.App()
    assert app.event_log(Archive, compression="zstd").definition.compression == "zstd"
    assert app.event_log(Counter).definition.compression == "none"
    schema = pa.schema([("k", pa.string())])
    assert app.topic("metrics", schema=schema, compression="lz4").definition.compression == "lz4"
    dcb = app.dcb_log("docs", events=Documented, compression="zstd")
    assert dcb.topic.definition.compression == "zstd"


@pytest.mark.parametrize("bad", ["gzip", "ZSTD", "", None])
def test_an_unknown_codec_fails_at_declaration(bad: object) -> None:
    app = rv.App()
    schema = pa.schema([("k", pa.string())])
    with pytest.raises(rv.SpecError, match="compression must be one of 'none', 'lz4', 'zstd'"):
        app.event_log(Archive, compression=bad)  # type: ignore[arg-type]
    with pytest.raises(rv.SpecError, match="compression"):
        app.topic("metrics", schema=schema, compression=bad)  # type: ignore[arg-type]
    with pytest.raises(rv.SpecError, match="compression"):
        app.dcb_log("docs", events=Documented, compression=bad)  # type: ignore[arg-type]


# -- through the relay to a collector --------------------------------------------------------


class Recording(rv.InMemoryBroker):
    """An in-memory broker that keeps every payload published through it."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[bytes] = []

    async def publish(self, messages: Sequence[rv.Message]) -> None:
        await super().publish(messages)
        self.payloads.extend(m.data for m in messages)


def probe(name: str, seen: list[tuple[int, str]]) -> rv.SideEffectHandler:
    handler = rv.SideEffectHandler(name)

    @handler.on(Documented)
    def _saw(ev: rv.Envelope[Documented]) -> None:
        assert ev.offset is not None
        seen.append((ev.offset, ev.event.doc))

    return handler


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``check()`` until true (a deadline, no fixed sleep)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_compressed_topic_reaches_a_collector_through_the_broker(file_url: str) -> None:
    broker = Recording()
    app = rv.App(store=file_url, broker=broker, options=LIVE_ONLY)
    log = app.event_log(Archive, compression="zstd")
    seen: list[tuple[int, str]] = []
    app.collect(probe("archive_probe", seen))
    docs = [document(i) for i in range(300)]
    async with app:
        for start in range(0, 300, 100):
            chunk = [Documented(doc=d, n=i) for i, d in enumerate(docs[start : start + 100])]
            await log.append(f"a-{start}", chunk, expected_version=0)
        await until(lambda: len(seen) >= 300)
    assert seen == [(i + 1, d) for i, d in enumerate(docs)]
    assert broker.payloads and all(p[:4] == ZSTD for p in broker.payloads)
    decoded = [o for p in broker.payloads for o in decode_batch(p).column("_offset").to_pylist()]
    assert sorted(set(decoded)) == list(range(1, 301))


@pytest.mark.parametrize(("sent", "read"), [("zstd", "none"), ("none", "zstd"), ("lz4", "zstd")])
async def test_a_consumer_decodes_what_a_producer_with_another_setting_sent(
    file_url: str, sent: Compression, read: Compression
) -> None:
    broker = rv.InMemoryBroker()
    reader = rv.App(store=file_url, broker=broker, options=LIVE_ONLY)
    reader.event_log(Archive, compression=read)
    seen: list[tuple[int, str]] = []
    reader.collect(probe("mixed_probe", seen))
    writer = rv.App(store=file_url, broker=broker)
    log = writer.event_log(Archive, compression=sent)
    docs = [document(i) for i in range(50)]
    async with reader, writer:
        events = [Documented(doc=d, n=i) for i, d in enumerate(docs)]
        await log.append("a-1", events, expected_version=0)
        await until(lambda: len(seen) >= 50)
    assert seen == [(i + 1, d) for i, d in enumerate(docs)]


# -- Parquet exports --------------------------------------------------------------------------


def parquet_codecs(path: Path) -> set[str]:
    meta = pq.ParquetFile(path).metadata
    return {
        meta.row_group(g).column(c).compression
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
    }


async def test_exports_use_the_topic_codec_and_snappy_without_one(
    file_url: str, tmp_path: Path
) -> None:
    app = rv.App(store=file_url)
    packed = app.event_log(Archive, compression="zstd")
    plain = app.event_log(Counter)
    async with app:
        events = [Documented(doc=document(i), n=i) for i in range(20)]
        await packed.append("a-1", events, expected_version=0)
        await plain.execute("c-1", Increment())
        assert await packed.export_parquet(tmp_path / "packed.parquet") == 20
        assert await plain.export_parquet(tmp_path / "plain.parquet") == 1
    assert parquet_codecs(tmp_path / "packed.parquet") == {"ZSTD"}
    assert parquet_codecs(tmp_path / "plain.parquet") == {"SNAPPY"}
    table = pq.read_table(tmp_path / "packed.parquet")
    assert table.column("doc").to_pylist() == [document(i) for i in range(20)]


@pytest.mark.spark
async def test_segments_use_the_topic_codec(file_url: str, tmp_path: Path) -> None:
    from reventless.spark.segments import export_segments, segments
    from reventless.store import require_sql

    app = rv.App(store=file_url)
    log = app.event_log(Archive, compression="lz4")
    async with app:
        events = [Documented(doc=document(i), n=i) for i in range(20)]
        await log.append("a-1", events, expected_version=0)
        store = require_sql(app.store, "segments")
        done = await export_segments(store, log.definition, tmp_path / "seg")
    assert done.rows == 20
    files = segments(tmp_path / "seg")
    assert files and all(parquet_codecs(p) == {"LZ4"} for _, _, p in files)
