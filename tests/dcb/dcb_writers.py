"""Writer processes of the DCB concurrency tests (importable by spawned processes)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import reventless as rv
from tests.dcb.store_model import EVENTS, NoteTaken


def claim(url: str, keys: list[str], barrier: Any, seed: int) -> list[str]:
    """Try to claim every key (``claimed:<key>``: the condition is that no event carries
    its tag yet), in a random order, after all writers are ready; returns the keys won."""

    async def main() -> list[str]:
        app = rv.App(store=url)
        log = app.dcb_log("claims", events=EVENTS)
        won = []
        async with app:
            barrier.wait()  # every process is open: the appends race
            order = list(keys)
            random.Random(seed).shuffle(order)

            async def one(key: str) -> None:
                tag = f"claimed:{key}"
                cond = rv.AppendCondition(rv.Query.of(tags=[tag]))
                try:
                    await log.append([NoteTaken(text=key)], condition=cond, tags=[tag])
                except rv.AppendConditionError:
                    return
                won.append(key)

            await asyncio.gather(*(one(k) for k in order))
        return won

    return asyncio.run(main())
