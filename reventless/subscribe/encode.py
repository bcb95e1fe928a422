"""Stored rows -> the JSON text of subscription events, a page at a time.

A subscription's event is ``{"offset", "type", "key", ..., "data": {field: value}}`` (the
names in ``EVENT_NAMES``, and ``"tags": [...]`` on a topic with tags), projected to the
listed ``columns``; its JSON text is exactly
``json.dumps(event, separators=(",", ":"))`` of the values ``to_json_value`` makes of the
decoded Arrow values (ISO text for datetimes, dates and times, integer microseconds for
durations, standard base64 for bytes, text for decimals). ``encode_events`` builds it for a
whole page at once: the rows become one Arrow batch; each column becomes a list of JSON
fragments in one pass (Arrow casts for integers, booleans, timestamps, dates, times and
durations, one ``json`` call for floats, ``json``'s C escaper for text; value by value only
for bytes, decimals, nested and ``Any`` columns and rare units); one template per topic and
projection joins each row's fragments. The SSE stream sends the texts as they are;
``EncodedEvents.dicts`` parses them for the Python API and the JSON endpoints.

Example::

    encoded = encode_events(info.schema, rows, ["qty"])
    encoded.texts[0]  # '{"offset":1,"data":{"qty":5}}'
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..codec import META_NAMES, OFFSET_AT, TopicSchema
from ..predicate import COLUMN_ALIASES

#: Stored metadata column -> the name it has in a subscription's JSON events.
EVENT_NAMES: dict[str, str] = {
    "_offset": "offset",
    "_type": "type",
    "_aggregate_id": "key",
    **{c: a for a, c in COLUMN_ALIASES.items() if a not in ("key", "aggregate_id", "type")},
}
_HIDDEN = {"_row_idx"}
#: The stored tags column: a tagged topic's events carry it as ``"tags": [...]``.
TAGS_COLUMN = "_tags"

# what the SSE frames have always carried: json.dumps(event, separators=(",", ":"))
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_escape: Callable[[str], str] = json.encoder.encode_basestring_ascii
_Frags = Callable[[Any], list[str]]  # Arrow array -> one JSON fragment per value


def to_json_value(v: Any) -> Any:
    """A JSON-compatible form of a decoded Arrow value."""
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, timedelta):
        return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, list):
        return [to_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_json_value(x) for k, x in v.items()}
    return v


class EncodedEvents:
    """A page's events as JSON texts, with their offsets; ``dicts()`` parses them (once)."""

    __slots__ = ("_dicts", "offsets", "texts")

    def __init__(self, offsets: list[int], texts: list[str]) -> None:
        self.offsets = offsets
        self.texts = texts
        self._dicts: list[dict[str, Any]] | None = None

    @classmethod
    def of_dicts(cls, events: Sequence[Mapping[str, Any]]) -> EncodedEvents:
        """The encoding of events given as dicts (each with an ``offset``)."""
        return cls([int(ev["offset"]) for ev in events], [_dumps(ev) for ev in events])

    def dicts(self) -> list[dict[str, Any]]:
        """The events as dicts (parsed from the texts the first time)."""
        if self._dicts is None:
            self._dicts = [json.loads(t) for t in self.texts]
        return self._dicts

    def __len__(self) -> int:
        return len(self.texts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EncodedEvents) and self.texts == other.texts

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EncodedEvents({len(self.texts)} events)"


def encode_events(
    schema: TopicSchema, rows: Sequence[Sequence[Any]], columns: Sequence[str] | None
) -> EncodedEvents:
    """Stored rows of a topic -> their events' JSON, projected to ``columns`` (user-facing
    names; ``offset`` is always kept)."""
    if not rows:
        return EncodedEvents([], [])
    batch = schema.to_arrow(rows)
    plan = _plan(schema, None if columns is None else tuple(sorted(set(columns))))
    frags = [conv(batch.column(i)) for i, conv in plan.columns]
    template = plan.template
    return EncodedEvents(
        batch.column(OFFSET_AT).to_pylist(), [template % row for row in zip(*frags, strict=True)]
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    columns: list[tuple[int, _Frags]]  # batch column index -> its fragments, template order
    template: str  # "{" ... "}" with one %s per column


@lru_cache(maxsize=256)
def _plan(schema: TopicSchema, columns: tuple[str, ...] | None) -> _Plan:
    keep = None if columns is None else {*columns, "offset"}
    arrow = schema.arrow_schema
    meta: list[tuple[str, int]] = [
        (name, META_NAMES.index(stored))
        for stored, name in EVENT_NAMES.items()
        if stored not in _HIDDEN and (keep is None or name in keep)
    ]
    if schema.tags_at is not None and (keep is None or "tags" in keep):
        meta.append(("tags", arrow.get_field_index(TAGS_COLUMN)))  # beside the metadata
    fields = [
        (c.name, arrow.get_field_index(c.name), c.sql_kind == "json")
        for c in schema.columns
        if c.name != TAGS_COLUMN and (keep is None or c.name in keep)
    ]
    convs = [(i, _frags(arrow.field(i).type, False)) for _, i in meta]
    convs += [(i, _frags(arrow.field(i).type, is_json)) for _, i, is_json in fields]
    parts = [f"{_key(name)}:%s" for name, _ in meta]
    if fields or keep is None:
        parts.append('"data":{' + ",".join(f"{_key(name)}:%s" for name, _, _ in fields) + "}")
    return _Plan(convs, "{" + ",".join(parts) + "}")


def _key(name: str) -> str:
    return _escape(name).replace("%", "%%")


# -- one column -> JSON fragments -----------------------------------------------------------


def _frags(t: pa.DataType, is_json: bool) -> _Frags:
    T = pa.types
    if is_json:
        return _any_json if T.is_string(t) or T.is_large_string(t) else _each
    if T.is_integer(t) or T.is_boolean(t):
        return _cast_text
    if T.is_floating(t) and not T.is_float16(t):
        return _floats
    if T.is_string(t) or T.is_large_string(t):
        return _strings
    if T.is_binary(t) or T.is_large_binary(t) or T.is_fixed_size_binary(t):
        return _binary
    if T.is_timestamp(t) and t.unit != "ns" and t.tz in (None, "UTC"):
        return _timestamps("" if t.tz is None else "+00:00")
    if T.is_date(t):
        return _dates
    if T.is_time(t) and t.unit != "ns":
        return _times
    if T.is_duration(t) and t.unit != "ns":
        return _durations
    return _each  # decimals, nested types, nanoseconds, null: value by value


def _texts(a: Any, text: Any) -> list[str]:
    out: list[str] = (pc.fill_null(text, "null") if a.null_count else text).to_pylist()
    return out


def _cast_text(a: Any) -> list[str]:
    return _texts(a, a.cast(pa.string()))  # integers as digits, booleans as true/false


def _floats(a: Any) -> list[str]:
    # one json call writes them as json.dumps does (repr, NaN, Infinity, null); no commas inside
    return _dumps(a.to_pylist())[1:-1].split(",") if len(a) else []


def _strings(a: Any) -> list[str]:
    values = a.to_pylist()
    if a.null_count:
        return ["null" if v is None else _escape(v) for v in values]
    return list(map(_escape, values))


def _binary(a: Any) -> list[str]:
    b64 = binascii.b2a_base64
    return [
        "null" if v is None else '"' + b64(v, newline=False).decode("ascii") + '"'
        for v in a.to_pylist()
    ]


def _iso(a: Any, text: Any, suffix: str) -> list[str]:
    # Arrow writes 6 fractional digits; isoformat leaves them out when they are all zero
    text = pc.replace_substring_regex(text, r"\.000000$", "")
    return _texts(a, pc.binary_join_element_wise('"', text, suffix + '"', ""))


def _timestamps(suffix: str) -> _Frags:
    def conv(a: Any) -> list[str]:
        text = a.cast(pa.timestamp("us", a.type.tz)).cast(pa.timestamp("us")).cast(pa.string())
        return _iso(a, pc.replace_substring(text, " ", "T", max_replacements=1), suffix)

    return conv


def _dates(a: Any) -> list[str]:
    return _iso(a, a.cast(pa.date32()).cast(pa.string()), "")


def _times(a: Any) -> list[str]:
    return _iso(a, a.cast(pa.time64("us")).cast(pa.string()), "")


def _durations(a: Any) -> list[str]:
    return _texts(a, a.cast(pa.duration("us")).cast(pa.int64()).cast(pa.string()))


def _any_json(a: Any) -> list[str]:
    return ["null" if v is None else _dumps(json.loads(v)) for v in a.to_pylist()]


def _each(a: Any) -> list[str]:
    return [_dumps(to_json_value(v)) for v in a.to_pylist()]
