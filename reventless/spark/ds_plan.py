"""Options, offsets and planned ranges of the ``reventless`` Spark data source.

A stream's offset is a JSON object ``{"<partition>": <next offset>}``: every event of that
topic partition below the next offset has been read. Offsets are the log's own (per topic,
gapless, shared by the partitions), so one number bounds every partition and a batch of
at most ``n`` events is "every offset below ``min(start) + n``".

Example::

    opts = SourceOptions.parse({"store": url, "topic": "Order", "startingOffsets": "earliest"})
    starts = opts.starting(partitions=4, head=120, horizon=0)     # {"0": 1, ..., "3": 1}
    ranges = plan(starts, {p: 121 for p in starts}, per_task=50)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ResnapshotRequiredError, SpecError
from .ds_filter import Bounds

__all__ = ["Offsets", "Range", "SourceOptions", "capped", "check_retained", "plan"]

#: ``{"<partition>": next offset}``, as Spark keeps it in the checkpoint.
Offsets = dict[str, int]
#: One Spark partition: ``(topic partition or None for every one, first, last offset)``.
Range = tuple[int | None, int, int]

#: Planned events per Spark task unless ``eventsPerPartition`` says otherwise.
EVENTS_PER_TASK = 250_000
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def _flag(options: Mapping[str, str], name: str) -> bool:
    raw = str(options.get(name.lower(), "")).strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SpecError(f"option {name!r} is true or false, not {raw!r}")


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SpecError(f"option {name!r} is a positive integer, not {raw!r}") from None
    if value < 1:
        raise SpecError(f"option {name!r} is a positive integer, not {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The data source's options (names as Spark takes them, case-insensitive)."""

    store: str
    topic: str
    opened: bool = False
    where: str | None = None
    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    max_events_per_trigger: int | None = None
    events_per_partition: int = EVENTS_PER_TASK

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Check the options (``SpecError`` naming the bad one)."""
        opts = {str(k).lower(): v for k, v in options.items()}
        store, topic = opts.get("store"), opts.get("topic")
        if not store:
            raise SpecError("the reventless source needs option 'store' (the store's URL)")
        if not topic:
            raise SpecError("the reventless source needs option 'topic' (a topic's name)")
        known = {
            "store", "topic", "opened", "where", "startingoffsets", "endingoffsets",
            "maxeventspertrigger", "eventsperpartition", "path",
        }  # fmt: skip
        unknown = sorted(set(opts) - known)
        if unknown:
            raise SpecError(f"unknown option(s) of the reventless source: {', '.join(unknown)}")
        where = opts.get("where")
        return cls(
            store=str(store),
            topic=str(topic),
            opened=_flag(opts, "opened"),
            where=str(where) if where and str(where).strip() else None,
            starting_offsets=str(opts.get("startingoffsets") or "earliest").strip(),
            ending_offsets=str(opts.get("endingoffsets") or "latest").strip(),
            max_events_per_trigger=_positive(opts, "maxEventsPerTrigger"),
            events_per_partition=_positive(opts, "eventsPerPartition") or EVENTS_PER_TASK,
        )

    def starting(self, partitions: int, head: int, horizon: int) -> Offsets:
        """Where a read starts: ``earliest`` (the first retained offset), ``latest`` (after
        the head), one offset for every partition, or a JSON object per partition (one
        it does not name starts at its earliest)."""
        return _offsets("startingOffsets", self.starting_offsets, partitions, head, horizon)

    def ending(self, partitions: int, head: int, horizon: int) -> Offsets:
        """Where a batch read ends (exclusive): ``latest`` is after the head (also for a
        partition the JSON object does not name)."""
        if self.ending_offsets == "earliest":
            raise SpecError("option 'endingOffsets' cannot be 'earliest'")
        return _offsets("endingOffsets", self.ending_offsets, partitions, head, horizon)


def _offsets(name: str, raw: str, partitions: int, head: int, horizon: int) -> Offsets:
    every = range(partitions)
    if raw == "earliest":
        return {str(p): horizon + 1 for p in every}
    if raw == "latest":
        return {str(p): head + 1 for p in every}
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, int) and not isinstance(parsed, bool) and parsed >= 1:
        return {str(p): parsed for p in every}
    if not isinstance(parsed, dict):
        raise SpecError(
            f"option {name!r} is 'earliest', 'latest', an offset or a JSON object "
            f'{{"<partition>": <next offset>}}, not {raw!r}'
        )
    out: Offsets = {}
    for key, value in parsed.items():
        if not (str(key).isdigit() and int(key) < partitions):
            raise SpecError(
                f"option {name!r}: the topic has partitions 0..{partitions - 1}, not {key!r}"
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SpecError(
                f"option {name!r}: partition {key}'s offset must be >= 1, not {value!r}"
            )
        out[str(int(key))] = value
    for p in every:  # a partition not named: from its earliest, to its latest
        out.setdefault(str(p), head + 1 if name == "endingOffsets" else horizon + 1)
    return out


def check_retained(topic: str, starts: Mapping[str, int], head: int, horizon: int) -> None:
    """``ResnapshotRequiredError`` when retention deleted offsets a read starting at
    ``starts`` still needs (every offset up to ``horizon`` is gone, in every partition)."""
    for p, start in sorted(starts.items(), key=lambda kv: int(kv[0])):
        if start <= horizon and start <= head:
            raise ResnapshotRequiredError(topic, start, horizon, int(p))


def capped(starts: Mapping[str, int], head: int, limit: int | None) -> Offsets:
    """The end offsets of a micro-batch from ``starts`` up to ``head``, holding at most
    ``limit`` events (offsets are unique across partitions)."""
    last = head
    if limit is not None and starts:
        last = min(head, min(starts.values()) + limit - 1)
    return {p: max(s, last + 1) for p, s in starts.items()}


def plan(
    starts: Mapping[str, int],
    ends: Mapping[str, int],
    *,
    partitioned: bool,
    per_task: int,
    bounds: Bounds | None = None,
) -> list[Range]:
    """Spark partitions covering ``[start, end)`` of each topic partition, each at most
    ``per_task`` events (a topic partition holds about 1/n of a topic's offsets, so its
    ranges span n times as many offsets), narrowed by pushed ``bounds``."""
    bounds = bounds or Bounds()
    n = len(starts)
    out: list[Range] = []
    spans: list[tuple[int | None, int, int]] = []
    if not partitioned:
        start, end = starts.get("0", 1), ends.get("0", 1)
        spans.append((None, start, end))
    else:
        for p, start in sorted(starts.items(), key=lambda kv: int(kv[0])):
            if bounds.partitions is None or int(p) in bounds.partitions:
                spans.append((int(p), start, ends[p]))
    step = per_task * (n if partitioned else 1)
    for part, start, end in spans:
        lo, hi = max(start, bounds.lo), min(end - 1, bounds.hi)
        while lo <= hi:
            top = min(hi, lo + step - 1)
            out.append((part, lo, top))
            lo = top + 1
    return out
