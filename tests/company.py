"""Company for the event loop: a task that is always ready to run, so code that acts
only when nothing else waits on the loop (``loop_is_alone``) sees it never alone."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def company() -> AsyncIterator[None]:
    """While inside: a task that yields to the loop and is ready again at once."""
    done = False

    async def busy() -> None:
        while not done:
            await asyncio.sleep(0)

    spinner = asyncio.create_task(busy())
    try:
        yield
    finally:
        done = True
        await spinner
