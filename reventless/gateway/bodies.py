"""The JSON bodies of the gateway's requests and answers, as the JSON Schemas of its
OpenAPI document (``openapi.py``): what ``app.py`` reads and writes, field by field.

Example::

    SCHEMAS["Offset"]  # {"type": "object", "properties": {"offset": ...}, ...}
"""

from __future__ import annotations

from typing import Any

from ..subscribe.encode import EVENT_NAMES
from .parse import MAX_INT


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


#: JSON integers as the gateway reads them: digits, no fraction or exponent (``7``, not
#: ``7.0``; JSON Schema cannot say so, the gateway answers 400).
_INT = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_INT,
    "description": "An integer written without a fraction or exponent (7, not 7.0).",
}
_STATE = {"type": "string", "enum": ["active", "paused", "closed"]}
_NULLABLE_TEXT = {"type": ["string", "null"]}
_NULLABLE_LIST = {"type": ["array", "null"], "items": {"type": "string"}}
_LEASES = {
    "type": "object",
    "description": "Partition -> lease epoch.",
    "additionalProperties": _INT,
    "propertyNames": {"pattern": "^[0-9]+$"},
}

#: The component schemas: response bodies, then request bodies.
SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "error": {"type": "string", "description": "A stable code (not_found, ...)."},
            "detail": {"type": "string", "description": "What was wrong, for people."},
        },
        "required": ["error", "detail"],
    },
    "Health": {"type": "object", "properties": {"ok": {"const": True}}, "required": ["ok"]},
    "Topic": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "partitions": {"type": "integer", "minimum": 1},
            "columns": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Names a subscription's `columns` may list.",
            },
        },
        "required": ["name", "partitions", "columns"],
    },
    "Status": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "topic": {"type": "string"},
            "where": _NULLABLE_TEXT,
            "columns": _NULLABLE_LIST,
            "types": _NULLABLE_LIST,
            "tenant": _NULLABLE_TEXT,
            "state": _STATE,
            "acked": _INT,
            "head": _INT,
            "lag": _INT,
            "horizon": _INT,
            "resnapshot_distance": {"type": ["integer", "null"]},
            "resnapshot_required": {"type": "boolean"},
            "partitions": {
                "type": "array",
                "description": "Consumer-group partitions (empty without members).",
                "items": {
                    "type": "object",
                    "properties": {
                        "partition": _INT,
                        "owner": _NULLABLE_TEXT,
                        "epoch": _INT,
                        "acked": _INT,
                    },
                    "required": ["partition", "owner", "epoch", "acked"],
                },
            },
        },
        "required": [
            "id",
            "topic",
            "where",
            "columns",
            "types",
            "tenant",
            "state",
            "acked",
            "head",
            "lag",
            "horizon",
            "resnapshot_distance",
            "resnapshot_required",
            "partitions",
        ],
    },
    "Event": {
        "type": "object",
        "description": "One event, projected to the subscription's (or the request's) "
        "columns; `offset` is always there, the event's fields are under `data`.",
        "properties": {
            **{name: {} for name in EVENT_NAMES.values()},
            "offset": {"type": "integer", "minimum": 1},
            "type": {"type": "string"},
            "key": _NULLABLE_TEXT,
            "tags": {"type": "array", "items": {"type": "string"}},
            "data": {"type": "object"},
        },
        "required": ["offset"],
        "additionalProperties": False,
    },
    "Page": {
        "type": "object",
        "properties": {
            "events": {"type": "array", "items": {"$ref": _ref("Event")}},
            "next_offset": {"type": "integer", "minimum": 1},
            "head": _INT,
            "lag": _INT,
            "state": _STATE,
            "leases": _LEASES,
        },
        "required": ["events", "next_offset", "head", "lag", "state"],
    },
    "Closed": {
        "type": "object",
        "properties": {"id": {"type": "string"}, "state": _STATE},
        "required": ["id", "state"],
    },
    "Acked": {"type": "object", "properties": {"acked": _INT}, "required": ["acked"]},
    "StreamToken": {
        "type": "object",
        "properties": {
            "token": {"type": "string"},
            "expires_at": {"type": "number", "description": "Unix time."},
        },
        "required": ["token", "expires_at"],
    },
    "Leases": {
        "type": "object",
        "properties": {
            "leases": _LEASES,
            "granted_at": {"type": "number"},
            "expires_at": {"type": "number"},
        },
        "required": ["leases", "granted_at", "expires_at"],
    },
    "Left": {"type": "object", "properties": {"left": {"const": True}}, "required": ["left"]},
    "CreateSubscription": {
        "type": "object",
        "properties": {
            "topic": {"type": "string"},
            "where": {"type": "string", "description": "SQL-style predicate on the events."},
            "columns": {"type": "array", "items": {"type": "string"}},
            "types": {"type": "array", "items": {"type": "string"}},
            "from": {
                "description": "First offset, or `latest` (only events after the head).",
                "oneOf": [
                    {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                    {"const": "latest"},
                ],
            },
            "id": {"type": "string", "pattern": "^[A-Za-z0-9._~-]{1,64}$"},
        },
        "required": ["topic"],
        "additionalProperties": False,
    },
    "Offset": {
        "type": "object",
        "properties": {"offset": _INT},
        "required": ["offset"],
        "additionalProperties": False,
    },
    "MemberAck": {
        "type": "object",
        "properties": {"partition": _INT, "offset": _INT, "epoch": _INT},
        "required": ["partition", "offset", "epoch"],
        "additionalProperties": False,
    },
    "Heartbeat": {
        "type": "object",
        "properties": {
            "ttl": {
                "type": "number",
                "minimum": 0.05,
                "maximum": 3600,
                "description": "Seconds the member's leases last without a heartbeat (default 10).",
            }
        },
        "additionalProperties": False,
    },
    "Empty": {"type": "object", "additionalProperties": False},
}


__all__ = ["SCHEMAS"]
