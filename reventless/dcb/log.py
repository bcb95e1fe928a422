"""``DcbLog``: a topic of many event types without aggregate ids, read by query and
appended to under a condition (dynamic consistency boundaries).

The total order lives in the log: its offsets are the positions of the DCB
specification, and a query, a condition and a decision are about one DCB log (one per
bounded context). Every event carries tags (its ``Tag`` fields, plus any given at
append), stored in its ``_tags`` column and in the topic's tag index. The rest of
reventless sees the log as a topic (``log.topic``): collectors with handlers on its event
types, ``where=`` predicates on ``tag``, the relay, subscriptions, Arrow and Parquet
reads, Spark.

``read(query, after=...)`` returns the matching events in log order (``env.offset`` is
the position, ``env.tags`` the tags); ``append(events, condition=...)`` appends them in one
transaction unless an event matching ``condition.query`` exists after
``condition.after`` (then ``AppendConditionError`` and nothing lands). The store keeps
this atomic under concurrent writers in many processes (``reventless.store.dcb``).

Example::

    courses = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)
    async with app:
        q = rv.Query.of(types=[CourseDefined, StudentSubscribed], tags=["course:c1"])
        seen = await courses.read(q)
        after = seen[-1].offset if seen else 0
        await courses.append(
            [StudentSubscribed(student_id="s1", course_id="c1")],
            condition=rv.AppendCondition(q, after=after),
        )
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from .. import telemetry
from ..codec import TopicSchema, add_tags
from ..decode import envelopes_of, opened, sealed
from ..errors import (
    AppendConditionError,
    CommandIdReusedError,
    MetadataError,
    StoreError,
)
from ..ids import now_us, uuid7_strs
from ..spec import Command, Envelope, Event, Metadata
from ..store.append import AppendRequest, AppendResult, CommandRecord
from ..store.port import Store
from ..tags import AppendCondition, Query, check_tag
from ..topic import Topic
from ..topicdef import TopicDef, partition_of, row_context, stored_rows
from .decider import Decider, ModelSource
from .execute import DecideOptions, DecisionResult, execute
from .queue import DecisionQueue

__all__ = ["DcbLog", "Tags"]

_EMPTY_META = Metadata()
C = TypeVar("C", bound=Command)
_F = TypeVar("_F", bound=Callable[..., Any])

#: Extra tags of an append: one list for every event, or one list per event.
Tags = Iterable[str] | Sequence[Iterable[str]]


class DcbLog:
    """A DCB log: ``read`` by query, ``append`` under a condition. Declared with
    ``App.dcb_log``; usable once the App has started. ``topic`` is the log as a plain
    ``Topic`` (Arrow batches, Parquet export, head).

    Example::

        envs = await courses.read(rv.Query.of(tags=["student:s1"]), after=0)
    """

    def __init__(
        self,
        definition: TopicDef,
        events: Sequence[type[Event]],
        *,
        service: str | None = None,
    ) -> None:
        if definition.kind != "dcb" or definition.schema.tags_at is None:
            raise StoreError(f"{definition.name!r} is not the definition of a DCB log")
        self.topic = Topic(definition, service=service)
        self.definition = definition
        self.name = definition.name
        self.service = service
        #: The event classes of the log (what ``append`` accepts).
        self.event_classes: tuple[type[Event], ...] = tuple(events)
        self._encoders = {e: definition.schema.encoder(e.event_type) for e in self.event_classes}

    @property
    def schema(self) -> TopicSchema:
        """The log's schema (field columns, then ``_tags``)."""
        return self.definition.schema

    @property
    def store(self) -> Store:
        """The store the log is built on (after the App started)."""
        return self.topic.store

    async def head(self) -> int:
        """The last position of the log (0 when empty)."""
        return await self.topic.head()

    async def read(
        self, query: Query, *, after: int = 0, limit: int | None = None
    ) -> list[Envelope[Any]]:
        """The events matching ``query`` at positions after ``after``, in log order (at
        most ``limit``). ``env.offset`` is an event's position, ``env.tags`` its tags."""
        rows = await self.store.read_query(self.name, query, after=after, limit=limit)
        schema = self.schema
        rows = await opened(self.store, schema, rows)
        return envelopes_of(schema, self.name, rows)

    def _extra(self, tags: Tags | None, n: int) -> list[tuple[str, ...]] | None:
        """Per event, the extra tags given at append (checked); None: none given."""
        if tags is None:
            return None
        if isinstance(tags, str):
            raise MetadataError("tags= takes a list of tags (or one list per event), not a str")
        given = list(tags)
        if all(isinstance(t, str) for t in given):
            one = tuple(check_tag(t) for t in given)
            return [one] * n if one else None
        if len(given) != n:
            raise MetadataError(f"tags= has {len(given)} lists for {n} events")
        out = []
        for item in given:
            if isinstance(item, str):
                raise MetadataError("tags= mixes tags and lists of tags")
            out.append(tuple(check_tag(t) for t in item))
        return out

    def _rows(
        self,
        events: Sequence[Event],
        extra: list[tuple[str, ...]] | None,
        meta: Metadata,
        tenant: str | None,
        command_id: str | None,
    ) -> list[tuple[Any, ...]]:
        ids = uuid7_strs(len(events))
        context = row_context(meta, self.service, tenant, command_id=command_id, first_id=ids[0])
        parts = self.definition.partitions
        entries = []
        for i, e in enumerate(events):
            fields = self._encoders[type(e)](e)
            if extra is not None and extra[i]:
                fields = (*fields[:-1], add_tags(fields[-1], extra[i]))
            # no aggregate ids: with several partitions, an event goes by its first tag
            tags = json.loads(fields[-1]) if parts > 1 else None
            key = tags[0] if tags else None
            entries.append(
                (None, None, e.event_type, e.schema_version, partition_of(key, parts), fields)
            )
        return stored_rows(now_us(), ids, context, entries)

    async def append(
        self,
        events: Sequence[Event],
        *,
        condition: AppendCondition | None = None,
        tags: Tags | None = None,
        meta: Metadata | None = None,
        command_id: str | None = None,
    ) -> AppendResult:
        """Append ``events`` in one transaction, if ``condition`` (when given) holds.

        Raises ``AppendConditionError`` (nothing lands) when an event matching
        ``condition.query`` exists after ``condition.after``. ``tags`` adds tags to the
        events' own (one list for every event, or one list per event). A ``command_id``
        that landed before appends nothing and returns the original result
        (``duplicate=True``); ``CommandIdReusedError`` if it landed elsewhere. Appending
        no events does nothing and returns the empty range at the head.
        """
        meta = meta or _EMPTY_META
        tenant = self.topic.check_tenant(meta.tenant)
        bad = next((e for e in events if type(e) not in self._encoders), None)
        if bad is not None:
            raise StoreError(f"{type(bad).__name__} is not an event of DCB log {self.name!r}")
        extra = self._extra(tags, len(events))
        if command_id is not None:
            landed = await self.landed(command_id)
            if landed is not None:
                return await self._appended(landed)
        if not events:
            head = await self.head()
            return AppendResult(self.name, head + 1, head)
        rows = await sealed(
            self.store, self.schema, self._rows(events, extra, meta, tenant, command_id)
        )
        request = AppendRequest(self.name, rows, command_id=command_id, condition=condition)
        try:
            with telemetry.appending(self.name, len(rows), self.store.dialect):
                res = await self.store.append(request)
        except AppendConditionError:
            # the event that failed the condition may be this very command's (a retry)
            landed = await self.landed(command_id)
            if landed is None:
                raise
            return await self._appended(landed)
        if res.duplicate:  # a racing twin recorded the id first
            landed = await self.landed(command_id)
            if landed is None:
                raise StoreError(f"command id {command_id!r} was reported landed but has no record")
            return await self._appended(landed)
        return res

    async def landed(self, command_id: str | None) -> CommandRecord | None:
        """Where the append that carried ``command_id`` landed on this log (None if none
        did); ``CommandIdReusedError`` if it landed on another log or aggregate."""
        if command_id is None:
            return None
        rec = await self.store.find_command(command_id)
        if rec is None:
            return None
        if rec.topic != self.name or rec.aggregate_id is not None:
            where = rec.topic if rec.aggregate_id is None else f"{rec.topic}/{rec.aggregate_id}"
            raise CommandIdReusedError(command_id, where, self.name)
        return rec

    async def _appended(self, rec: CommandRecord) -> AppendResult:
        first, last = rec.first_offset, rec.last_offset
        if first is None or last is None or last < first:
            return AppendResult(self.name, 0, -1, duplicate=True)
        rows = await self.store.read(self.name, first, last - first + 1, upto=last)
        return AppendResult(self.name, first, last, rows, duplicate=True)

    # -- decisions (reventless.dcb.decider and .execute) ------------------------------------

    @property
    def decider(self) -> Decider:
        """The log's command handlers (``decides``, ``include``; pure, no I/O)."""
        found = self.__dict__.get("_decider")
        if found is None:
            found = self.__dict__["_decider"] = Decider(self.event_classes, name=self.name)
        return found

    def decides(self, command: type[C], **models: ModelSource[C]) -> Callable[[_F], _F]:
        """Register the decorated function as the handler of ``command`` on this log; each
        keyword names a decision model it receives folded (``Decider.decides``).

        Example::

            @courses.decides(SubscribeStudent, capacity=CourseCapacity)
            def subscribe(cmd: SubscribeStudent, capacity: int | None) -> StudentSubscribed:
                ...
        """
        return self.decider.decides(command, **models)

    def include(self, decider: Decider) -> None:
        """Take in the handlers of a ``Decider`` declared over (some of) this log's events."""
        self.decider.include(decider)

    async def execute(
        self,
        command: Command,
        *,
        meta: Metadata | None = None,
        command_id: str | None = None,
        options: DecideOptions | None = None,
    ) -> DecisionResult:
        """Decide ``command``: read the union of its models' queries once, fold each model
        on its own events, run the handler, append under the derived condition; on a
        conflict read what landed since and decide again (backoff with jitter). Decisions
        of this process whose queries share a tag or type take turns (``DecideOptions``).

        ``rv.Rejected`` reaches the caller and nothing lands. A ``command_id`` that landed
        before returns the original result (``duplicate=True``) without deciding.

        Example::

            res = await courses.execute(SubscribeStudent(student_id="s1", course_id="c1"))
        """
        queue = self.__dict__.get("_queue")
        if queue is None:
            queue = self.__dict__["_queue"] = DecisionQueue()
        return await execute(
            self,
            self.decider,
            command,
            meta=meta,
            command_id=command_id,
            options=options,
            queue=queue,
        )
