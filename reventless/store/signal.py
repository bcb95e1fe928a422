"""A change signal: how many changes there were, and a wait for the next one.

The store's commit signal and its schedule signal are both one of these. A change
between two waits is not lost: ``count`` has moved on, so the next wait returns at once.

Example::

    signal = ChangeSignal()
    seen = signal.count
    ...                                   # read what is there
    await signal.wait(1.0, seen)          # until a change after ``seen`` (or 1 s)
"""

from __future__ import annotations

import asyncio

__all__ = ["ChangeSignal"]


class ChangeSignal:
    """A counter of changes and a wait for the next one (used on one event loop)."""

    __slots__ = ("_event", "count")

    def __init__(self) -> None:
        #: Changes signalled so far.
        self.count = 0
        # made by the first waiter after a change (a change with no one waiting is free)
        self._event: asyncio.Event | None = None

    def fire(self) -> None:
        """Note a change and wake every waiter."""
        self.count += 1
        event = self._event
        if event is not None:
            event.set()
            self._event = None

    async def wait(self, timeout: float, seen: int) -> bool:
        """True once ``count`` has moved past ``seen`` (at once if it has); False after
        ``timeout`` seconds without a change."""
        if self.count != seen:
            return True
        try:
            event = self._event
            if event is None:
                event = self._event = asyncio.Event()
            async with asyncio.timeout(timeout):  # not wait_for: 3.11's can eat a cancel
                await event.wait()
        except TimeoutError:
            return False
        return True
