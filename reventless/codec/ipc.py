"""The broker payload: one record batch as Arrow IPC stream bytes, and back.

The relay encodes each published page of a topic partition this way; collectors decode it
before filtering and building rows. Adapters move the bytes untouched.

A topic declared with ``compression="lz4"`` or ``"zstd"`` has its payloads compressed
whole: the IPC stream bytes in one standard LZ4 or Zstandard frame (``zstd -d`` reads
it). The whole stream, not Arrow's per-buffer IPC compression: a payload carries its
schema (~2 KiB of the ~2.3 KiB of a one-event batch) and some forty small buffers, and
per-buffer compression made a one-event batch of a small topic larger (0.8x) and cost
about 0.25 ms of CPU per batch in codec set-up (``bench/compression.py``). A frame that
would not be smaller is not sent: the payload stays plain. ``decode_batch`` tells the
three apart by their first bytes (a frame's magic number, an IPC stream's continuation
marker), whatever the topic says now, so messages published before a change of setting,
or by another producer, still decode.

Example::

    data = encode_batch(batch, "zstd")
    assert decode_batch(data).to_batches()[0].equals(batch)
"""

from __future__ import annotations

from typing import Final, Literal, get_args

import pyarrow as pa

#: How a topic's broker payloads are compressed (``"none"``: plain Arrow IPC bytes).
Compression = Literal["none", "lz4", "zstd"]
COMPRESSIONS: Final[tuple[str, ...]] = get_args(Compression)

# First bytes of a Zstandard frame and of an LZ4 frame (both little-endian magic numbers).
_MAGIC: Final[dict[bytes, str]] = {b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4"}
_codecs: dict[str, pa.Codec] = {}


def _codec(name: str) -> pa.Codec:
    codec = _codecs.get(name)
    if codec is None:
        codec = _codecs[name] = pa.Codec(name)
    return codec


def encode_batch(batch: pa.RecordBatch, compression: Compression = "none") -> bytes:
    """Arrow IPC stream bytes of one record batch (the broker payload), compressed into
    one ``compression`` frame when that is smaller."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    raw = sink.getvalue()
    if compression == "none":
        return bytes(raw.to_pybytes())
    packed = _codec(compression).compress(raw, asbytes=True)
    return packed if len(packed) < raw.size else bytes(raw.to_pybytes())


def decode_batch(data: bytes) -> pa.Table:
    """Inverse of ``encode_batch``, for any compression (told by the payload's first
    bytes); an IPC stream with Arrow's own buffer compression decodes too."""
    codec = _MAGIC.get(bytes(data[:4]))
    if codec is None:
        return pa.ipc.open_stream(data).read_all()
    return pa.ipc.open_stream(pa.CompressedInputStream(pa.BufferReader(data), codec)).read_all()


def parquet_compression(compression: Compression) -> str:
    """The Parquet codec of a topic's exports: its own (Spark 4 reads both), or pyarrow's
    default (snappy) where the topic compresses nothing, as before the option existed."""
    return "snappy" if compression == "none" else compression
