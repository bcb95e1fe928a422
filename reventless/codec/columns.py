"""The log's metadata columns, ``Column``, SQL kinds and the SQL value conventions.

Owns the constants every other codec module shares (Arrow timestamp/duration types, the
field-metadata key, the int64 range, the shared JSON encoder) and the scalar conversions
that define how datetimes, times and durations are stored (see the package docstring).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any, Literal

import pyarrow as pa

SqlKind = Literal["int", "float", "bool", "text", "blob", "json"]
_Conv = Callable[[Any], Any]

_TS = pa.timestamp("us", tz="UTC")
_US = pa.duration("us")
_ENC = "reventless.encoding"  # field metadata: "json" (JSON text) or a nested bytes encoding
_LO, _HI = -(2**63), 2**63 - 1
# one shared encoder: json.dumps with options builds a new JSONEncoder per call
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_loads = json.loads
_NOT_NULL = (
    "_offset",
    "_row_idx",
    "_produced_at",
    "_type",
    "_schema_version",
    "_msg_id",
    "_partition",
)

META_FIELDS: tuple[pa.Field, ...] = tuple(
    pa.field(n, t, nullable=n not in _NOT_NULL)
    for n, t in [
        ("_offset", pa.int64()),
        ("_row_idx", pa.int32()),
        ("_produced_at", _TS),
        ("_aggregate_id", pa.string()),
        ("_version", pa.int64()),
        ("_type", pa.string()),
        ("_schema_version", pa.int32()),
        ("_msg_id", pa.string()),
        *((n, pa.string()) for n in ("_correlation_id", "_causation_id", "_user")),
        *((n, pa.string()) for n in ("_service", "_ip", "_tenant")),
        ("_partition", pa.int32()),
        # the W3C trace context of the command that appended it (reventless.telemetry)
        ("_trace", pa.string()),
    ]
)
"""The log's metadata columns, in storage order, before every topic's field columns."""

META_NAMES: tuple[str, ...] = tuple(f.name for f in META_FIELDS)
"""Names of ``META_FIELDS``, same order."""

FIELDS_AT = len(META_NAMES)
"""Index of the first field column in a stored row."""

# Where each metadata column sits in a stored row (``row[OFFSET_AT]``, not ``row[0]``).
OFFSET_AT = META_NAMES.index("_offset")
ROW_IDX_AT = META_NAMES.index("_row_idx")
PRODUCED_AT_AT = META_NAMES.index("_produced_at")
AGGREGATE_AT = META_NAMES.index("_aggregate_id")
VERSION_AT = META_NAMES.index("_version")
TYPE_AT = META_NAMES.index("_type")
SCHEMA_VERSION_AT = META_NAMES.index("_schema_version")
MSG_ID_AT = META_NAMES.index("_msg_id")
CORRELATION_AT = META_NAMES.index("_correlation_id")
TENANT_AT = META_NAMES.index("_tenant")
PARTITION_AT = META_NAMES.index("_partition")
TRACE_AT = META_NAMES.index("_trace")

META_SQL_KINDS: tuple[SqlKind, ...] = tuple(
    "text" if pa.types.is_string(f.type) else "int" for f in META_FIELDS
)
"""SQL kinds of ``META_FIELDS``; ``_produced_at`` is stored as epoch microseconds."""


@dataclass(frozen=True, slots=True)
class Column:
    """One field column of a topic: its Arrow type, SQL storage kind and nullability."""

    name: str
    arrow_type: pa.DataType
    sql_kind: SqlKind
    nullable: bool
    #: Personal data (``rv.Personal``): the subject field's name, "" for the aggregate id,
    #: None for an ordinary column. Such a column holds sealed text (``PERSONAL_KEY``).
    personal: str | None = None


#: Arrow field metadata of a personal column: the subject field ("" = the aggregate id).
PERSONAL_KEY = "reventless.personal"


class Plaintext:
    """A personal field's JSON text in the clear: what an encoder emits (the store's
    keyring seals it before anything is written; nothing else can write it) and what
    opening a sealed value gives the decoder."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return "Plaintext(...)"


def _dt_text(v: datetime) -> str:
    v = v.replace(tzinfo=UTC) if v.utcoffset() is None else v.astimezone(UTC)
    return v.isoformat(timespec="microseconds")


def _time_text(v: time) -> str:
    if v.tzinfo is not None:
        raise ValueError(f"time {v} has a tzinfo, which Arrow time64 cannot hold")
    return v.isoformat(timespec="microseconds")


def _td_micros(v: timedelta) -> int:
    n = (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if not _LO <= n <= _HI:
        raise ValueError(f"duration {v} overflows int64 microseconds")
    return n
