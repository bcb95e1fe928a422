"""Executing a command on a DCB log: read, fold, decide, append under a condition, retry.

One attempt reads the union of the models' queries once (events in log order, with
their positions and tags), folds each model on the events matching its own query, runs
the handler and appends what it decided with ``AppendCondition(union query,
after=<last position read>)``: the append fails, landing nothing, if any event the
decision would have read has landed since. The next attempt, after an exponential backoff
with jitter (``DecideOptions``, so writers contending on the same tags spread out instead
of retrying in lockstep), reads only the events after that position and folds on.

A command sent with a ``command_id`` lands at most once: the append records the id in
the same transaction (``rv_commands``), and a command whose id is recorded already is
answered from that record (``duplicate=True``: the original offsets and events, read back
from the log) without running the handler. A retry that lost the race to its own twin
(another process sending the same id) sees the id recorded and answers the same way.

Example::

    result = await courses.execute(SubscribeStudent(student_id="s1", course_id="c1"))
    result.events        # (StudentSubscribed(...),)
    result.last_offset   # its position in the log
    result.attempts      # 1 unless another writer got in between
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import telemetry
from ..codec import TopicSchema
from ..decode import decode_row, opened
from ..errors import AppendConditionError, Rejected, StoreError
from ..spec import Command, Envelope, Event, Metadata
from ..store.append import AppendResult, CommandRecord
from ..store.port import Store
from ..tags import AppendCondition, Query
from .decider import Decider
from .decision import DecisionModel
from .queue import DecisionQueue, queue_keys

__all__ = ["DecideOptions", "DecidingLog", "DecisionResult", "execute"]


@dataclass(frozen=True, slots=True)
class DecideOptions:
    """Retries of a decision whose append condition failed.

    ``max_attempts`` decisions in all (then ``AppendConditionError`` reaches the caller);
    before attempt n+1 it waits ``min(backoff_max, backoff_base * 2**n)`` seconds times a
    random factor in [0.5, 1.5). The defaults are those of ``LogOptions``.

    ``queue``: decisions of this process whose queries share a tag (or a type) take turns
    (``DecisionQueue``) instead of clashing in the store and retrying; other processes
    are caught by the append condition either way.

    Example::

        rv.DecideOptions(max_attempts=50, backoff_max=0.05)
    """

    max_attempts: int = 10
    backoff_base: float = 0.002
    backoff_max: float = 0.2
    queue: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("DecideOptions.max_attempts must be at least 1")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise ValueError("DecideOptions backoff times must not be negative")


@dataclass(frozen=True, slots=True)
class DecisionResult:
    """What a decision did.

    ``events`` were appended at ``first_offset..last_offset`` (``0, -1`` if the handler
    decided none). ``position`` is the position the decision read up to (the last event
    its query matched; 0 if none): the append condition's ``after``. ``attempts`` counts
    the decisions made (1 + retries). ``duplicate`` is True when the command id had landed
    before: nothing ran, ``events`` and offsets are the original ones, and ``position``
    and ``attempts`` are 0.
    """

    events: tuple[Event, ...]
    first_offset: int
    last_offset: int
    position: int
    attempts: int
    duplicate: bool = False


class DecidingLog(Protocol):
    """What ``execute`` needs of a DCB log (``DcbLog`` has it)."""

    name: str

    @property
    def store(self) -> Store:
        """The store the log is built on."""
        ...

    @property
    def schema(self) -> TopicSchema:
        """The log's schema (decodes stored rows)."""
        ...

    async def read(self, query: Query, *, after: int = 0) -> list[Envelope[Any]]:
        """The events matching ``query`` after ``after``, in log order."""
        ...

    async def landed(self, command_id: str | None) -> CommandRecord | None:
        """Where the append that carried ``command_id`` landed (None if none did)."""
        ...

    async def append(
        self,
        events: Sequence[Event],
        *,
        condition: AppendCondition | None = None,
        tags: Any = None,
        meta: Metadata | None = None,
        command_id: str | None = None,
    ) -> AppendResult:
        """Append ``events`` in one transaction if ``condition`` holds."""
        ...


async def _original(log: DecidingLog, rec: CommandRecord) -> DecisionResult:
    """A decision's original outcome, rebuilt from its record and the log."""
    first, last = rec.first_offset, rec.last_offset
    if first is None or last is None or last < first:
        return DecisionResult((), 0, -1, 0, 0, duplicate=True)
    rows = await log.store.read(log.name, first, last - first + 1, upto=last)
    rows = await opened(log.store, log.schema, rows)
    events = tuple(decode_row(log.schema, r) for r in rows)
    return DecisionResult(events, first, last, 0, 0, duplicate=True)


async def _must_have_landed(log: DecidingLog, command_id: str | None) -> DecisionResult:
    rec = await log.landed(command_id)
    if rec is None:  # the store said duplicate, so the record is committed
        raise StoreError(f"command id {command_id!r} was reported landed but has no record")
    return await _original(log, rec)


async def execute(
    log: DecidingLog,
    decider: Decider,
    command: Command,
    *,
    meta: Metadata | None = None,
    command_id: str | None = None,
    options: DecideOptions | None = None,
    queue: DecisionQueue | None = None,
) -> DecisionResult:
    """Decide ``command`` on ``log`` with ``decider``'s handler; retry on conflicts.

    With a ``queue``, decisions of this process whose queries overlap take turns.

    ``rv.Rejected`` from the handler reaches the caller and nothing lands. After
    ``options.max_attempts`` conflicting attempts the last ``AppendConditionError`` does.

    With tracing on, the decision is an ``execute <Command>`` span (its wait in the queue
    included); its append is an event on it, each retry another, and the events it
    appends carry its trace context.
    """
    with telemetry.command(log.name, type(command).__name__):
        return await _execute(log, decider, command, meta, command_id, options, queue)


async def _execute(
    log: DecidingLog,
    decider: Decider,
    command: Command,
    meta: Metadata | None,
    command_id: str | None,
    options: DecideOptions | None,
    queue: DecisionQueue | None,
) -> DecisionResult:
    opts = options or DecideOptions()
    models = decider.models(command)  # built once: a retry reads the same query
    query = decider.query(models.values())
    landed = await log.landed(command_id)
    if landed is not None:
        return await _original(log, landed)
    if queue is None or not opts.queue:
        return await _attempts(log, decider, command, models, query, meta, command_id, opts)
    async with queue.hold(queue_keys(query)):
        return await _attempts(log, decider, command, models, query, meta, command_id, opts)


async def _attempts(
    log: DecidingLog,
    decider: Decider,
    command: Command,
    models: dict[str, DecisionModel[Any]],
    query: Query,
    meta: Metadata | None,
    command_id: str | None,
    opts: DecideOptions,
) -> DecisionResult:
    states = decider.start(models)
    position = 0
    for attempt in range(1, opts.max_attempts + 1):
        # A retry reads only what landed since the last attempt and folds on from there.
        envs = await log.read(query, after=position)
        if envs:
            decider.fold(models, states, ((e.event, e.tags) for e in envs))
            position = envs[-1].offset
        try:
            events = decider.run(command, states)
        except Rejected:
            # A twin of this command (another process) may have landed in between: then
            # the state refuses what the log already holds.
            landed = await log.landed(command_id)
            if landed is not None:
                return await _original(log, landed)
            raise
        if not events:
            landed = await log.landed(command_id)
            if landed is not None:
                return await _original(log, landed)
            return DecisionResult((), 0, -1, position, attempt)
        condition = AppendCondition(query, after=position)
        try:
            res = await log.append(events, condition=condition, meta=meta, command_id=command_id)
        except AppendConditionError as clash:
            landed = await log.landed(command_id)  # the winner may have been this command
            if landed is not None:
                return await _original(log, landed)
            if attempt == opts.max_attempts:
                raise
            telemetry.retried(log.name, attempt, clash, "dcb")
            delay = min(opts.backoff_max, opts.backoff_base * 2 ** (attempt - 1))
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            continue
        if res.duplicate:
            return await _must_have_landed(log, command_id)
        return DecisionResult(tuple(events), res.first_offset, res.last_offset, position, attempt)
    raise AssertionError("unreachable")  # pragma: no cover
