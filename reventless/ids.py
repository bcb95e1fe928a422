"""Time-ordered identifiers (UUIDv7, RFC 9562) and the clock of stored timestamps."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_seq = 0
_VARIANT = {h: "89ab"[int(h, 16) & 3] for h in "0123456789abcdef"}


def now_us() -> int:
    """Now, in microseconds since the epoch: ``_produced_at`` and every stored
    ``created_at``."""
    return time.time_ns() // 1000


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
    rand = os.urandom(8 * n).hex()  # 16 hex digits of randomness per id
    out = []
    last_ms, head = -1, ""
    for i, (ms, seq) in enumerate(_reserve(n)):
        if ms != last_ms:  # ids of one call mostly share their millisecond
            t = f"{ms:012x}"
            last_ms, head = ms, f"{t[:8]}-{t[8:]}-7"
        j = 16 * i
        # the first random nibble carries the RFC 9562 variant bits (0b10xx)
        out.append(
            f"{head}{seq:03x}-{_VARIANT[rand[j]]}{rand[j + 1 : j + 4]}-{rand[j + 4 : j + 16]}"
        )
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
