"""Time-ordered identifiers (UUIDv7, RFC 9562)."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def _reserve(n: int) -> list[tuple[int, int]]:
    """``n`` strictly increasing (unix ms, 12-bit counter) pairs."""
    global _last_ms, _seq
    out = []
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _seq = ms, -1
        for _ in range(n):
            _seq += 1
            if _seq > 0xFFF:  # counter overflow: borrow the next millisecond
                _last_ms += 1
                _seq = 0
            out.append((_last_ms, _seq))
    return out


def uuid7_strs(n: int) -> list[str]:
    """``n`` UUIDv7 strings, strictly increasing within this process (one syscall for all).

    Example::

        >>> len(uuid7_strs(3))
        3
    """
    rand = os.urandom(8 * n)
    out = []
    for i, (ms, seq) in enumerate(_reserve(n)):
        low = int.from_bytes(rand[8 * i : 8 * i + 8], "big") & 0x3FFF_FFFF_FFFF_FFFF
        h = f"{(ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | low:032x}"
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


def uuid7_str() -> str:
    """One UUIDv7 as a string."""
    return uuid7_strs(1)[0]


def uuid7() -> uuid.UUID:
    """Return a UUIDv7: 48-bit unix milliseconds, a 12-bit counter, then random bits.

    Identifiers made in one process are strictly increasing.

    Example::

        >>> uuid7().version
        7
    """
    return uuid.UUID(uuid7_str())
