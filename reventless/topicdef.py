"""Topic definitions (what the store and brokers know of a topic) and the metadata columns
every stored row starts with."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import telemetry
from .codec import TopicSchema
from .codec.ipc import COMPRESSIONS, Compression
from .errors import SpecError
from .spec import Metadata

#: ``dcb``: a DCB log (many event types, no aggregate ids, tags; ``reventless.dcb``).
TopicKind = Literal["aggregate", "model", "arrow", "dcb"]


@dataclass(frozen=True, slots=True)
class TopicDef:
    """What the store and broker need to know about a topic.

    ``tenant`` pins the topic to one tenant (``None``: global). ``key`` names the
    column that partitions a schema topic (its rows' ``_aggregate_id``), so that
    per-key order is kept by brokers. ``partitions`` (fixed when the topic is created)
    splits the topic by aggregate id: each event's ``_partition`` is
    ``crc32(aggregate_id) % partitions``; order is kept per partition, and a collector
    group's members share the partitions. ``compression`` compresses the topic's broker
    payloads (``"lz4"``, ``"zstd"``; ``"none"``: plain Arrow IPC) and names the codec of
    its Parquet exports; consumers decode every payload whatever the setting.
    """

    name: str
    schema: TopicSchema
    kind: TopicKind
    tenant: str | None = None
    key: str | None = None
    partitions: int = 1
    compression: Compression = "none"

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 1024:
            raise SpecError(f"topic {self.name!r}: partitions must be 1..1024")
        if self.compression not in COMPRESSIONS:
            choices = ", ".join(map(repr, COMPRESSIONS))
            raise SpecError(
                f"topic {self.name!r}: compression must be one of {choices}, "
                f"not {self.compression!r}"
            )


def partition_of(aggregate_id: str | None, partitions: int) -> int:
    """The partition of an aggregate (stable across processes and runs)."""
    if partitions == 1 or aggregate_id is None:
        return 0
    return zlib.crc32(aggregate_id.encode()) % partitions


#: The metadata a caller gives every row of one append: correlation id, causation id, user,
#: service, ip, tenant (``META_NAMES`` order), and the trace context of the append.
RowContext = tuple[
    str | None, str | None, str | None, str | None, str | None, str | None, str | None
]
#: One row's own metadata and field values: aggregate id, version, type, schema version,
#: partition, fields.
RowEntry = tuple[str | None, int | None, str, int, int, Sequence[Any]]


def row_context(
    meta: Metadata,
    service: str | None,
    tenant: str | None,
    *,
    command_id: str | None = None,
    first_id: str | None = None,
) -> RowContext:
    """The metadata every row of one append shares: ``meta``'s, with ``service`` where
    ``meta`` names none. A command's rows are caused by its ``command_id`` and correlated
    by it (or, without one, by the append's ``first_id``) unless ``meta`` says otherwise;
    the current span's trace context (``telemetry.traceparent``) goes with them."""
    return (
        meta.correlation_id or command_id or first_id,
        meta.causation_id or command_id,
        meta.user,
        meta.service or service,
        meta.ip,
        tenant,
        telemetry.traceparent(),
    )


#: One command's events for ``command_rows``: aggregate id, the version they were decided
#: on, partition, events.
CommandEvents = tuple[str, int, int, Sequence[Any]]


def command_rows(
    produced_us: int,
    ids: Iterator[str],
    context: RowContext,
    commands: Iterable[CommandEvents],
    encoders: Mapping[str, Callable[[Any], tuple[Any, ...]]],
) -> list[tuple[Any, ...]]:
    """``stored_rows`` of commands' events (each command's versions from its ``version
    + 1``, ``_row_idx`` from 0), message ids drawn from ``ids``: the per-command hot path,
    and ``execute_many``'s for a whole window. A command's rows are correlated by the
    context's correlation id or, without one, by the command's first message id."""
    correlation, causation, user, service, ip, tenant, trace = context
    out: list[tuple[Any, ...]] = []
    append = out.append
    for aggregate_id, version, partition, events in commands:
        first = None
        for k, e in enumerate(events):
            t = type(e)
            i = next(ids)
            if first is None:
                first = correlation or i
            append(
                (
                    k,
                    produced_us,
                    aggregate_id,
                    version + k + 1,
                    t.event_type,
                    t.schema_version,
                    i,
                    first,
                    causation,
                    user,
                    service,
                    ip,
                    tenant,
                    partition,
                    trace,
                    *encoders[t.event_type](e),
                )
            )
    return out


def stored_rows(
    produced_us: int, ids: Sequence[str], context: RowContext, entries: Iterable[RowEntry]
) -> list[tuple[Any, ...]]:
    """The rows of one append request: ``META_NAMES`` but ``_offset`` (the store assigns
    it when it appends), then the fields. The one builder of the metadata columns, for
    aggregate events and schema-topic rows alike. Row ``i`` has ``_row_idx`` ``i`` and
    message id ``ids[i]``; all rows share ``produced_us`` and ``context``."""
    correlation, causation, user, service, ip, tenant, trace = context
    return [
        (
            i,
            produced_us,
            aggregate_id,
            version,
            type_name,
            schema_version,
            ids[i],
            correlation,
            causation,
            user,
            service,
            ip,
            tenant,
            partition,
            trace,
            *fields,
        )
        for i, (aggregate_id, version, type_name, schema_version, partition, fields) in enumerate(
            entries
        )
    ]
