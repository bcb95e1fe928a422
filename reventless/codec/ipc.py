"""The broker payload: one record batch as Arrow IPC stream bytes, and back.

The relay encodes each published page of a topic partition this way; collectors decode it
before filtering and building rows. Adapters move the bytes untouched.
"""

from __future__ import annotations

import pyarrow as pa


def encode_batch(batch: pa.RecordBatch) -> bytes:
    """Arrow IPC stream bytes of one record batch (the broker payload)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_batch(data: bytes) -> pa.Table:
    """Inverse of ``encode_batch``."""
    return pa.ipc.open_stream(data).read_all()
