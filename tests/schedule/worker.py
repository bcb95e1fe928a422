"""A process that runs the scheduler on a store until nothing is pending, for the
multi-process tests: ``python -m tests.schedule.worker URL SERVICE LEASE``.

It prints ``ready`` once its imports are done and starts when a line comes on stdin (a
test can have the next worker ready while the current one runs), prints ``started``
once its App runs and, when no schedule is left, ``done FIRED DUPLICATES`` (the
commands it landed, and those it found landed already)."""

from __future__ import annotations

import asyncio
import sys

import reventless as rv
from tests.schedule.model import Order


async def run(url: str, service: str, lease: float) -> None:
    options = rv.AppOptions(scheduler=rv.SchedulerOptions(lease=lease, poll_interval=0.2))
    app = rv.App(store=url, service=service, options=options)
    app.event_log(Order)
    async with app:
        print("started", flush=True)
        while await app.scheduler.pending(limit=1):
            await asyncio.sleep(0.05)
        print(f"done {app.scheduler.fired} {app.scheduler.duplicates}", flush=True)


if __name__ == "__main__":
    print("ready", flush=True)
    if not sys.stdin.readline():  # the test is gone
        sys.exit(0)
    asyncio.run(run(sys.argv[1], sys.argv[2], float(sys.argv[3])))
