"""Per-key turns on one event loop: what a dict of ``asyncio.Lock`` does, for less.

An EventLog runs the commands on one aggregate one at a time, in the order they came.
Most of the time a key has no holder: then taking a turn is a dict insert, with no lock
object, coroutine or future. Only a key that is busy queues its callers (first come,
first served) on futures.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Turns:
    """One holder per key at a time; the others wait in arrival order.

    Example::

        turns = Turns()
        if not turns.try_take("a-1"):
            await turns.wait("a-1")
        try:
            ...  # the only task working on "a-1"
        finally:
            turns.give("a-1")
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        # key -> the futures of the callers waiting for it (present while it is held;
        # None until a second caller comes: most turns end without one)
        self._held: dict[str, deque[asyncio.Future[None]] | None] = {}

    def __len__(self) -> int:
        """Keys held now."""
        return len(self._held)

    def try_take(self, key: str) -> bool:
        """Take ``key``'s turn if no one holds it (True); False: ``wait`` for it."""
        if key in self._held:
            return False
        self._held[key] = None
        return True

    async def wait(self, key: str) -> None:
        """Wait for ``key``'s turn behind the callers already waiting (after ``try_take``
        said False). A caller cancelled as its turn came passes the turn on."""
        held = self._held
        if key not in held:  # given up since try_take
            held[key] = None
            return
        waiters = held[key]
        if waiters is None:
            waiters = held[key] = deque()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.give(key)  # the turn reached us as we were cancelled
            elif fut in waiters:
                waiters.remove(fut)
            raise

    def give(self, key: str) -> None:
        """End the holder's turn: the next waiter's begins, or the key is free."""
        waiters = self._held[key]
        while waiters:  # (None: no one ever waited)
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        del self._held[key]
