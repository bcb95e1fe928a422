"""PostgreSQL stopped and started again under a running App (issue 19, B2).

A private server (``tests.pg_private``) is stopped in the middle of appends from several
tasks and of a read model's catch-up, with ``fast`` (sessions rolled back, a clean
shutdown) and ``immediate`` (every server process killed: a crash, recovered at the next
start). Then it is started again, and the App, never restarted, must show:

- every command during the outage either succeeded or raised a typed reventless error
  within a bound (no raw driver exception, no hang), and so does every read;
- nothing is half-written: each command's events are all there at consecutive offsets or
  none is; offsets and every aggregate's versions are gapless; every command that
  returned success is in the store (read back on a fresh connection);
- the caller's retry of a failed command with the same command id succeeds exactly once
  (``duplicate=True`` when the failed attempt had in fact committed);
- the read model equals the fold of the log and its collector reaches the head; so does
  a batch handler's, whose catch-up reads Arrow pages through the ADBC driver while the
  server goes away (the driver must fail typed, not abort the process: adbc-driver-
  postgresql 1.8.0 to 1.10.0 did, ``std::logic_error`` on a lost connection); the relay
  publishes up to the head.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

import reventless as rv
from tests.faults import store_audit as audit
from tests.model import Counter, Increment, Incremented, ResetCounter, totals
from tests.pg_private import PrivatePostgres, StopMode, private_pg  # noqa: F401  (fixture)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: A command that takes longer than this during the outage counts as hung.
HANG = 20.0
#: How long recovery may take (connections re-opened, collectors caught up).
DEADLINE = 45.0
WORKERS = 6
BACKLOG_AGGREGATES, BACKLOG_EACH = 40, 150  # 6,000 events for the catch-up


@dataclass(slots=True)
class Sent:
    """One command a worker sent, and what became of it."""

    command_id: str
    aggregate_id: str
    command: Increment | ResetCounter
    after_restart: bool
    ok: bool = False
    error: rv.ReventlessError | None = None

    @property
    def events(self) -> int:
        return 2 if isinstance(self.command, ResetCounter) else 1


async def until(what: str, check: Callable[[], bool | Awaitable[bool]], timeout: float) -> None:
    """Poll ``check`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_restart_during_appends_and_catch_up(
    private_pg: PrivatePostgres,  # noqa: F811
    mode: StopMode,
) -> None:
    url = await asyncio.to_thread(private_pg.create_database, "rv_restart")
    app = rv.App(
        store=url,
        options=rv.AppOptions(collector=rv.CollectorOptions(page_size=20, poll_interval=0.2)),
    )
    log = app.event_log(Counter)
    view = app.collect(totals)
    # A batch handler of every column: its catch-up reads Arrow pages (ADBC) on PostgreSQL.
    batched: set[int] = set()
    pages = rv.SideEffectHandler("batch_offsets")

    @pages.on_batch(Incremented)
    async def _batch(batch: rv.EventBatch[Incremented]) -> None:
        batched.update(ev.offset for ev in batch)

    pager = app.collect(pages)
    sent: list[Sent] = []
    up = asyncio.Event()
    stop = asyncio.Event()

    async def worker(w: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            cmd = ResetCounter() if i % 5 == 0 else Increment(by=1 + i % 3)
            s = Sent(f"{mode}-w{w}-{i}", f"c{(w + i) % 4}", cmd, up.is_set())
            sent.append(s)
            try:
                async with asyncio.timeout(HANG):  # a hang fails the test (TimeoutError)
                    await log.execute(
                        s.aggregate_id,
                        cmd,
                        command_id=s.command_id,
                        meta=rv.Metadata(correlation_id=s.command_id),
                    )
                s.ok = True
            except rv.ReventlessError as exc:  # typed: anything else fails the test
                s.error = exc
                await asyncio.sleep(0.02)  # the caller's backoff before its next command

    async with app:
        collector = app.collector("counter_totals")
        table = app.store.table_of("Counter")
        # A backlog the read model will be catching up on when the server goes down.
        view.pause()
        pager.pause()
        await asyncio.gather(
            *(
                log.append(f"b{k}", [Incremented(by=k)] * BACKLOG_EACH, expected_version=0)
                for k in range(BACKLOG_AGGREGATES)
            )
        )
        backlog = BACKLOG_AGGREGATES * BACKLOG_EACH
        async with asyncio.TaskGroup() as tasks:
            for w in range(WORKERS):
                tasks.create_task(worker(w))
            await until("commands before the outage", lambda: sum(s.ok for s in sent) >= 60, 30)
            view.resume()
            pager.resume()
            await until(
                "the catch-up to start",
                lambda: collector.checkpoints[("Counter", 0)] > 0,
                DEADLINE,
            )
            await asyncio.to_thread(private_pg.stop, mode)
            caught_at_stop = collector.checkpoints[("Counter", 0)]
            paged_at_stop = app.collector("batch_offsets").checkpoints[("Counter", 0)]
            for read in (lambda: view.get("c0"), view.lag, app.store.heads):
                with pytest.raises(rv.StoreError):  # reads fail typed too
                    await asyncio.wait_for(read(), HANG)
            failed_before = sum(s.error is not None for s in sent)
            await until(
                "commands to fail during the outage",
                lambda: sum(s.error is not None for s in sent) >= failed_before + 3 * WORKERS,
                HANG,
            )
            await asyncio.to_thread(private_pg.start)
            up.set()
            await until(
                "commands to succeed after the restart",
                lambda: sum(s.ok and s.after_restart for s in sent) >= 10 * WORKERS,
                DEADLINE,
            )
            stop.set()

        assert caught_at_stop < backlog, "the server went down after the catch-up ended"
        assert paged_at_stop < backlog, "the server went down after the batch catch-up ended"
        failed = [s for s in sent if s.error is not None]
        assert failed, "no command saw the outage"
        assert all(isinstance(s.error, rv.StoreError) for s in failed), {
            type(s.error) for s in failed
        }

        # What the restart left: every success whole, every failure whole or absent.
        events = await asyncio.to_thread(audit.logged, url, table)
        audit.check_gapless(events)
        landed = audit.by_command(e for e in events if e.aggregate_id[0] == "c")
        for s in sent:
            got = landed.get(s.command_id, [])
            if s.ok or got:  # a failure may have committed, its answer lost: then whole
                audit.check_whole(got, s.events)

        # The caller retries each failed command with its command id: it lands once.
        retried = []
        for s in failed:
            res = await log.execute(
                s.aggregate_id,
                s.command,
                command_id=s.command_id,
                meta=rv.Metadata(correlation_id=s.command_id),
            )
            retried.append(res.duplicate)
            assert res.duplicate == (s.command_id in landed)

        events = await asyncio.to_thread(audit.logged, url, table)
        audit.check_gapless(events)
        landed = audit.by_command(e for e in events if e.aggregate_id[0] == "c")
        assert set(landed) == {s.command_id for s in sent}
        for s in sent:
            audit.check_whole(landed[s.command_id], s.events)
        head = events[-1].offset
        assert head == backlog + sum(s.events for s in sent)

        # Collector and relay recovered in this App: the read model is the log's fold.
        async def caught_up() -> bool:
            return all(v == 0 for v in (await view.lag()).values())

        await until("the read model to reach the head", caught_up, DEADLINE)
        assert collector.checkpoints[("Counter", 0)] == head
        paging = app.collector("batch_offsets")
        await until(
            "the batch handler to reach the head",
            lambda: paging.checkpoints[("Counter", 0)] == head,
            DEADLINE,
        )
        incremented = {e.offset for e in events if e.type == "Incremented"}
        assert batched == incremented  # every one handled (at least once), none invented
        relay = app.relay
        assert relay is not None
        await until("the relay to publish the head", lambda: relay.published["Counter"] == head, 30)
        assert await asyncio.to_thread(audit.checkpoint, url, "counter_totals", "Counter") == head
        assert await asyncio.to_thread(audit.totals_rows, url) == audit.fold_totals(events)

    print(
        f"{mode}: {len(sent)} commands, {len(failed)} failed during the outage "
        f"({sum(retried)} of them had committed), checkpoint at stop {caught_at_stop}/{backlog}"
    )
