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


#: Random hex digits drawn ahead (one syscall per ~250 ids, not one per call).
_POOL_BYTES = 4096
_pool = ""
_pool_at = 0


#: The 12-bit counter as text, for every value.
_SEQ3 = tuple(f"{i:03x}" for i in range(4096))


def _reserve(n: int) -> tuple[list[tuple[int, int, int]], str]:
    """``n`` strictly increasing (unix ms, 12-bit counter) pairs, as runs of ``(ms,
    first counter, count)`` (one run unless the counter overflows), and ``16 * n``
    random hex digits."""
    global _last_ms, _seq, _pool, _pool_at
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _seq = ms, -1
        if _seq + n <= 0xFFF:  # the common case: one run
            runs = [(_last_ms, _seq + 1, n)]
            _seq += n
        else:
            runs = []
            left = n
            while left:
                if _seq >= 0xFFF:  # counter overflow: borrow the next millisecond
                    _last_ms += 1
                    _seq = -1
                take = min(left, 0xFFF - _seq)
                runs.append((_last_ms, _seq + 1, take))
                _seq += take
                left -= take
        need = 16 * n
        if _pool_at + need > len(_pool):
            _pool, _pool_at = os.urandom(max(_POOL_BYTES, need // 2)).hex(), 0
        rand = _pool[_pool_at : _pool_at + need]
        _pool_at += need
    return runs, rand


#: The text of the last millisecond an id was made in (ids of one ms share it).
_head: tuple[int, str] = (-1, "")


def _forget_pool() -> None:
    """A forked child draws its own randomness (else it would repeat its parent's ids)."""
    global _pool, _pool_at
    _pool, _pool_at = "", 0


os.register_at_fork(after_in_child=_forget_pool)


def uuid7_strs(n: int) -> list[str]:
    """``n`` UUIDv7 strings, strictly increasing within this process.

    Example::

        >>> len(uuid7_strs(3))
        3
    """
    if n == 1:  # a command's one event: the hot path
        return [_one()]
    runs, rand = _reserve(n)
    out: list[str] = []
    seqs, variant = _SEQ3, _VARIANT
    j = 0
    for ms, first, count in runs:
        last_ms, head = _head
        if ms != last_ms:  # ids mostly share their millisecond with the previous ones
            head = _new_head(ms)
        # the first random nibble carries the RFC 9562 variant bits (0b10xx)
        out += [
            f"{head}{seqs[s]}-{variant[rand[k]]}{rand[k + 1 : k + 4]}-{rand[k + 4 : k + 16]}"
            for s, k in zip(range(first, first + count), range(j, j + 16 * count, 16), strict=True)
        ]
        j += 16 * count
    return out


def _new_head(ms: int) -> str:
    """The text of an id's millisecond (``xxxxxxxx-xxxx-7``), kept as ``_head``: ids of
    one millisecond share it."""
    global _head
    t = f"{ms:012x}"
    head = f"{t[:8]}-{t[8:]}-7"
    _head = (ms, head)
    return head


_acquire, _release = _lock.acquire, _lock.release


def _one() -> str:
    """``uuid7_strs(1)[0]`` in one step: ``_reserve(1)`` without its runs and slices
    (~1.8x faster: a command of one event asks for one id)."""
    global _last_ms, _seq, _pool, _pool_at
    _acquire()  # (not ``with``: half the cost)
    try:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms, _seq = ms, 0
        elif _seq < 0xFFF:
            _seq += 1
        else:  # counter overflow: borrow the next millisecond
            _last_ms, _seq = _last_ms + 1, 0
        ms, seq, at = _last_ms, _seq, _pool_at
        if at + 16 > len(_pool):
            _pool, at = os.urandom(_POOL_BYTES).hex(), 0
        _pool_at = at + 16
        r = _pool[at : at + 16]
    finally:
        _release()
    last_ms, head = _head
    if ms != last_ms:
        head = _new_head(ms)
    return f"{head}{_SEQ3[seq]}-{_VARIANT[r[0]]}{r[1:4]}-{r[4:]}"


def uuid7_str() -> str:
    """One UUIDv7 as a string."""
    return _one()


def uuid7() -> uuid.UUID:
    """Return a UUIDv7: 48-bit unix milliseconds, a 12-bit counter, then random bits.

    Identifiers made in one process are strictly increasing.

    Example::

        >>> uuid7().version
        7
    """
    return uuid.UUID(uuid7_str())
