"""Time-ordered identifiers (UUIDv7, RFC 9562)."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_seq = 0


def uuid7() -> uuid.UUID:
    """Return a UUIDv7: 48-bit unix milliseconds, then a 12-bit counter, then random bits.

    Identifiers made in one process are strictly increasing.

    Example::

        >>> uuid7().version
        7
    """
    global _last_ms, _seq
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _seq += 1
            if _seq > 0xFFF:  # counter overflow: borrow the next millisecond
                _last_ms += 1
                _seq = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _seq = 0
        seq = _seq
    rand = int.from_bytes(os.urandom(8), "big") & 0x3FFF_FFFF_FFFF_FFFF
    value = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand
    return uuid.UUID(int=value)


def uuid7_str() -> str:
    """``str(uuid7())``."""
    return str(uuid7())
