"""Per-topic compression of broker payloads: size on the wire and what it costs.
``python -m bench.compression [--quick] [--out BENCHMARKS.md]``

Two topics, each with ``compression="none"``, ``"lz4"`` and ``"zstd"``:

- *large*: one ~4 KiB JSON document per event (order lines: words from a small
  vocabulary, prices, quantities and random 128-bit ids, so it compresses like real data,
  not like a repeated string);
- *small*: an amount and a currency code per event.

*Payload*: the relay's payload of one page of 1 event (a quiet system) and of 1,000
events (the relay's largest page: a busy one), built from stored rows as the relay builds
it (and, for comparison, Arrow's own per-buffer IPC compression with zstd, which
reventless does not send). Bytes per event on the wire, the ratio to plain Arrow IPC,
and ``encode_batch`` and ``decode_batch`` each alone: events and MB of plain IPC bytes
per CPU second of the process (the best of several rounds; CPU time, as the machine may
be shared).

*End to end*: events appended in chunks of 100 to an in-memory SQLite store, through
the relay and the in-memory broker to a collector that never polls the store (what it
sees came through the broker): events/s from the first append to the last event seen,
and the process's CPU time per event.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import reventless as rv
from reventless.codec import TopicSchema
from reventless.codec.ipc import Compression, decode_batch, encode_batch
from reventless.spec import Metadata
from reventless.topicdef import row_context, stored_rows

CODECS: tuple[Compression, ...] = ("none", "lz4", "zstd")
WORDS = [
    *("steel", "bolt", "washer", "hinge", "bracket", "walnut", "oak", "panel", "rail"),
    *("clamp", "spring", "cable", "sensor", "valve", "gasket", "filter", "pump", "motor"),
    *("belt", "pulley", "lamp", "switch", "relay", "fuse", "socket", "frame", "shelf"),
]
LIVE_ONLY = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=60, grace=60))


class Documented(rv.Event):
    doc: str


class Archive(rv.Aggregate):
    events = Documented

    @rv.applies(Documented)
    def _documented(self, e: Documented) -> None:
        pass


class Deposited(rv.Event):
    amount: int
    currency: str


def document(rng: random.Random, size: int = 4096) -> str:
    """An order document of about ``size`` bytes of JSON."""
    lines: list[dict[str, Any]] = []
    length = 0
    while length < size:
        line = {
            "id": f"{rng.getrandbits(128):032x}",
            "sku": f"SKU-{rng.randrange(10_000):05d}",
            "name": " ".join(rng.choices(WORDS, k=4)),
            "qty": rng.randrange(1, 20),
            "price": round(rng.uniform(1, 500), 2),
        }
        lines.append(line)
        length += len(json.dumps(line)) + 2
    return json.dumps({"customer": f"c-{rng.randrange(10**6)}", "lines": lines})


def batch_of(schema: TopicSchema, type_name: str, events: Sequence[rv.Event]) -> pa.RecordBatch:
    """The relay's record batch of ``events`` (stored rows with offsets from 1)."""
    encode = schema.encoder(type_name)
    entries = [(f"a-{i % 50}", i + 1, type_name, 1, 0, encode(e)) for i, e in enumerate(events)]
    ids = [f"{i:032x}" for i in range(len(events))]
    rows = stored_rows(1_700_000_000_000_000, ids, row_context(Metadata(), "bench", None), entries)
    return schema.to_arrow([(i + 1, *row) for i, row in enumerate(rows)])


def best_rate(step: Callable[[], object], seconds: float, rounds: int) -> float:
    """Calls of ``step`` per CPU second of this process: the best of ``rounds`` rounds of
    ``seconds`` each. CPU time, not wall time: on a shared machine a wall-clock rate says
    more about the neighbours than about the codec."""
    best = 0.0
    for _ in range(rounds):
        calls, start = 0, time.process_time()
        while (elapsed := time.process_time() - start) < seconds:
            step()
            calls += 1
        best = max(best, calls / elapsed)
    return best


#: Arrow's own IPC compression (each buffer compressed alone), measured beside the
#: whole-payload frames ``encode_batch`` writes; reventless does not send it.
BUFFERS = "zstd, per buffer"


def encoder(batch: pa.RecordBatch, codec: str) -> Callable[[], bytes]:
    if codec == BUFFERS:
        options = pa.ipc.IpcWriteOptions(compression="zstd", use_threads=False)

        def per_buffer() -> bytes:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
                writer.write_batch(batch)
            return bytes(sink.getvalue().to_pybytes())

        return per_buffer
    return lambda: encode_batch(batch, compression(codec))


def compression(codec: str) -> Compression:
    for c in CODECS:
        if c == codec:
            return c
    raise ValueError(codec)


def decoder(data: bytes) -> Callable[[], pa.Table]:
    return lambda: decode_batch(data)


def payloads(quick: bool) -> list[dict[str, Any]]:
    rng = random.Random(7)
    large = [Documented(doc=document(rng)) for _ in range(1000)]
    small = [Deposited(amount=rng.randrange(10**6), currency="EUR") for _ in range(1000)]
    topics: list[tuple[str, TopicSchema, str, Sequence[rv.Event]]] = [
        ("large", TopicSchema.from_events("Archive", [Documented]), "Documented", large),
        ("small", TopicSchema.from_events("Ledger", [Deposited]), "Deposited", small),
    ]
    seconds, rounds = (0.05, 2) if quick else (0.3, 5)
    out: list[dict[str, Any]] = []
    for name, schema, type_name, events in topics:
        for page in (1, 1000):
            batch = batch_of(schema, type_name, events[:page])
            plain = len(encode_batch(batch))
            for codec in (*CODECS, BUFFERS):
                data = encoder(batch, codec)()
                assert decode_batch(data).to_batches()[0].equals(batch)
                enc = best_rate(encoder(batch, codec), seconds, rounds)
                dec = best_rate(decoder(data), seconds, rounds)
                out.append(
                    {
                        "topic": name,
                        "page": page,
                        "codec": codec,
                        "bytes": len(data) / page,
                        "ratio": plain / len(data),
                        "enc_events": enc * page,
                        "enc_mb": enc * plain / 1e6,
                        "dec_events": dec * page,
                        "dec_mb": dec * plain / 1e6,
                    }
                )
                print(f"payload {name} page {page} {codec}: {out[-1]}", flush=True)
    return out


async def end_to_end(codec: Compression, events: int) -> tuple[float, float]:
    """Events/s (wall clock) through store, relay, in-memory broker and a collector, and
    the process's CPU microseconds per event."""
    rng = random.Random(11)
    docs = [document(rng) for _ in range(200)]
    app = rv.App(store="sqlite://", options=LIVE_ONLY)
    log = app.event_log(Archive, compression=codec)
    seen = 0
    probe = rv.SideEffectHandler("bench_probe")

    @probe.on(Documented)
    def _saw(ev: rv.Envelope[Documented]) -> None:
        nonlocal seen
        seen += 1

    app.collect(probe)
    async with app:
        start, cpu = time.perf_counter(), time.process_time()
        for chunk in range(events // 100):
            batch = [Documented(doc=docs[(chunk + i) % len(docs)]) for i in range(100)]
            await log.append(f"a-{chunk}", batch, expected_version=0)
        async with asyncio.timeout(300):
            while seen < events:
                await asyncio.sleep(0.001)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return events / wall, cpu / events * 1e6


def report(
    rows: list[dict[str, Any]], e2e: dict[str, tuple[float, float]], events: int, cmd: str
) -> str:
    lines = [
        "",
        "## Compression of broker payloads",
        "",
        f'Command: `{cmd}`. A topic\'s `compression=` (`"none"`, `"lz4"`, `"zstd"`) '
        "compresses the relay's Arrow IPC payload as one LZ4 or Zstandard frame (pyarrow's "
        "codecs, zstd level 1). *large*: a ~4 KiB JSON document per event (words, prices, "
        "random 128-bit ids); *small*: an amount and a currency. *zstd, per buffer*: "
        "Arrow's own IPC compression (every buffer alone), which reventless does not use: "
        "small pages grow and each costs a codec set-up per buffer. A page of 1 event is "
        "what a quiet system sends, 1,000 the relay's largest page. Bytes per event as sent; ratio "
        "to plain Arrow IPC; encode and decode each alone, per CPU second of the process "
        "(the best of several rounds; MB are plain IPC bytes). Plain IPC decodes without a "
        "copy, hence its rates.",
        "",
        "| topic | page | codec | bytes/event | ratio | encode events/s | encode MB/s "
        "| decode events/s | decode MB/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['topic']} | {r['page']:,} | {r['codec']} | {r['bytes']:,.0f} "
            f"| {r['ratio']:.1f}x | {r['enc_events']:,.0f} | {r['enc_mb']:,.0f} "
            f"| {r['dec_events']:,.0f} | {r['dec_mb']:,.0f} |"
        )
    lines += [
        "",
        f"End to end: {events:,} *large* events appended 100 per call to an in-memory "
        "SQLite store, through the relay and the in-memory broker to a collector fed only by "
        "the broker. CPU is the whole process's (store, relay, collector) per event; "
        "events per CPU second is the rate one free core would give.",
        "",
        "| codec | events/s (wall) | CPU us/event | events per CPU second |",
        "|---|---|---|---|",
        *(
            f"| {c} | {rate:,.0f} | {cpu:,.0f} | {1e6 / cpu:,.0f} |"
            for c, (rate, cpu) in e2e.items()
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compression")
    ap.add_argument("--quick", action="store_true", help="short rounds, fewer events")
    ap.add_argument("--out", default=None, help="a markdown file to put the section into")
    a = ap.parse_args()
    rows = payloads(a.quick)
    events = 1_000 if a.quick else 20_000
    e2e: dict[str, tuple[float, float]] = {}
    for codec in CODECS:
        e2e[codec] = asyncio.run(end_to_end(codec, events))
        print(f"end to end {codec}: {e2e[codec]}", flush=True)
    cmd = "python -m bench.compression" + (" --quick" if a.quick else "")
    block = report(rows, e2e, events, cmd)
    print(block)
    if a.out:
        from bench.blocks import put_block

        put_block(Path(a.out), "compression", block)


if __name__ == "__main__":
    main()
