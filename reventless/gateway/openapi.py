"""The gateway's HTTP API as data: ``OPERATIONS`` lists every route (method, path, handler
name, auth, parameters, body, answers) and ``create_app`` builds its routes from it, so the
OpenAPI 3.1 document (``document``, served at ``GET /openapi.json``) cannot drift from
what the gateway serves.

Errors are JSON ``{"error": code, "detail": text}`` (``#/components/schemas/Error``); the
SSE stream is ``text/event-stream``; ``/metrics`` is the Prometheus text format.

Example::

    doc = document(max_limit=10_000)
    doc["paths"]["/subscriptions/{id}/ack"]["post"]["requestBody"]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .bodies import SCHEMAS
from .parse import MAX_INT

#: ``none``: public; ``bearer``: ``Authorization: Bearer <token>``; ``stream``: a bearer
#: token or a stream token in ``?access_token=`` (browsers' EventSource); ``operator``: a
#: bearer token of no tenant (an operator's).
Auth = Literal["none", "bearer", "stream", "operator"]
Method = Literal["GET", "POST", "DELETE"]

_JSON = "application/json"
_SSE = "text/event-stream"
_PROMETHEUS = "text/plain"


@dataclass(frozen=True, slots=True)
class Param:
    """A query, path or header parameter."""

    name: str
    where: Literal["query", "path", "header"]
    schema: Mapping[str, Any]
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """One response: a description and its body (a component schema name, or an inline
    schema) in ``media``; ``schema`` None: no body schema."""

    description: str
    schema: str | Mapping[str, Any] | None = None
    media: str = _JSON


@dataclass(frozen=True, slots=True)
class Operation:
    """One route: ``name`` is the operationId and the handler ``create_app`` binds."""

    method: Method
    path: str
    name: str
    summary: str
    answers: Mapping[int, Answer]
    auth: Auth = "bearer"
    #: The JSON body's component schema (None: no body).
    body: str | None = None
    body_required: bool = True
    params: tuple[Param, ...] = ()
    tags: tuple[str, ...] = ("subscriptions",)
    description: str = ""


_ERRORS = {
    400: "Bad input (unknown field, malformed value, bad predicate, NUL or lone surrogate).",
    401: "A valid bearer token is required (or a valid stream token).",
    403: "The token is a tenant's; this route needs an operator token.",
    404: "Unknown subscription, topic or member (or another tenant's).",
    409: "Ack beyond the head, or a lost lease.",
    410: "The cursor is behind the retained horizon: resnapshot required.",
    413: "The body is larger than the gateway's max_body_bytes.",
    415: "The body is not application/json.",
    500: "An unexpected failure (logged by the gateway).",
}


def _errors(*codes: int) -> dict[int, Answer]:
    return {c: Answer(_ERRORS[c], "Error") for c in (*codes, 500)}


def _path(name: str, description: str, **schema: Any) -> Param:
    return Param(name, "path", {"type": "string", **schema}, description, True)


def _query_int(name: str, description: str, low: int, high: int | None = None) -> Param:
    bounds = {"minimum": low, "maximum": MAX_INT if high is None else high}
    return Param(name, "query", {"type": "integer", **bounds}, description)


_ID = _path("id", "The subscription id.", minLength=1)
_WORKER = _path("worker", "The worker (group member) id.", minLength=1, maxLength=200)
_LIST = {"type": "string"}
_COLUMNS = Param("columns", "query", _LIST, "Project events to these names (comma separated).")
_TYPES = Param("types", "query", _LIST, "Only these event types (comma separated).")
_FROM = _query_int("from", "First offset to read (default: after the acked offset).", 1)

_SSE_DESCRIPTION = (
    "Server-Sent Events: `id: <offset>` / `event: event` / `data: <event JSON>` per event; "
    "control events without id: `paused`, `resumed`, `backpressure` "
    '(`{"backlog", "head"}`), `resnapshot` and `closed` (`{"reason"}`: `closed` or '
    "`shutdown`), which end the stream; comment lines keep an idle connection open. "
    "Reconnect with `Last-Event-ID` to resume after the last event received."
)


def operations(max_limit: int = 10_000) -> tuple[Operation, ...]:
    """Every route of the gateway (``max_limit``: the largest page a client may ask for)."""
    limit = _query_int("limit", f"Events per page (1..{max_limit}; default 100).", 1, max_limit)
    sub, member = "/subscriptions/{id}", "/subscriptions/{id}/members/{worker}"
    common = (400, 401, 413)
    return (
        Operation(
            "GET",
            "/health",
            "health",
            "Liveness",
            {200: Answer("Up.", "Health")},
            "none",
            tags=("gateway",),
        ),
        Operation(
            "GET",
            "/openapi.json",
            "openapi",
            "This document",
            {200: Answer("The OpenAPI 3.1 document of this gateway.", {"type": "object"})},
            "none",
            tags=("gateway",),
        ),
        Operation(
            "GET",
            "/metrics",
            "metrics",
            "Prometheus metrics",
            {
                200: Answer(
                    "The current metrics in the Prometheus text exposition format.",
                    {"type": "string"},
                    _PROMETHEUS,
                ),
                **_errors(400, 401, 403, 413),
            },
            "operator",
            tags=("gateway",),
        ),
        Operation(
            "GET",
            "/topics",
            "topics",
            "Topics the token may subscribe to",
            {
                200: Answer("The topics.", {"type": "array", "items": {"$ref": _ref("Topic")}}),
                **_errors(*common),
            },
        ),
        Operation(
            "POST",
            "/subscriptions",
            "create",
            "Create a subscription",
            {201: Answer("Created; its status.", "Status"), **_errors(*common, 404, 415)},
            body="CreateSubscription",
        ),
        Operation(
            "GET",
            "/subscriptions",
            "listing",
            "List subscription ids",
            {
                200: Answer("The ids.", {"type": "array", "items": {"type": "string"}}),
                **_errors(*common),
            },
        ),
        Operation(
            "GET",
            sub,
            "status",
            "A subscription's status",
            {200: Answer("Its status.", "Status"), **_errors(*common, 404)},
            params=(_ID,),
        ),
        Operation(
            "DELETE",
            sub,
            "close",
            "Close a subscription",
            {200: Answer("Closed.", "Closed"), **_errors(*common, 404)},
            params=(_ID,),
        ),
        Operation(
            "GET",
            sub + "/events",
            "events",
            "A page of events",
            {200: Answer("The page.", "Page"), **_errors(*common, 404, 410)},
            params=(_ID, _FROM, limit, _COLUMNS, _TYPES),
        ),
        Operation(
            "GET",
            sub + "/stream",
            "stream",
            "The subscription's events as Server-Sent Events",
            {
                200: Answer(_SSE_DESCRIPTION, {"type": "string"}, _SSE),
                **_errors(*common, 404, 410),
            },
            "stream",
            params=(
                _ID,
                _FROM,
                _COLUMNS,
                _TYPES,
                Param(
                    "access_token",
                    "query",
                    {"type": "string"},
                    "A stream token (POST .../stream-tokens) instead of the Authorization "
                    "header, for EventSource.",
                ),
                Param(
                    "Last-Event-ID",
                    "header",
                    {"type": "string", "pattern": "^[0-9]{1,19}$"},
                    "Resume after this offset (sent by EventSource when it reconnects).",
                ),
            ),
            description=_SSE_DESCRIPTION,
        ),
        Operation(
            "POST",
            sub + "/stream-tokens",
            "mint_stream_token",
            "Mint a short-lived stream token for EventSource",
            {201: Answer("The token.", "StreamToken"), **_errors(*common, 404, 415)},
            body="Empty",
            body_required=False,
            params=(_ID,),
        ),
        Operation(
            "POST",
            sub + "/ack",
            "ack",
            "Acknowledge up to an offset",
            {200: Answer("The acked offset.", "Acked"), **_errors(*common, 404, 409, 415)},
            body="Offset",
            params=(_ID,),
        ),
        Operation(
            "POST",
            sub + "/seek",
            "seek",
            "Move the cursor to an offset (back or forth)",
            {200: Answer("The acked offset.", "Acked"), **_errors(*common, 404, 409, 415)},
            body="Offset",
            params=(_ID,),
        ),
        Operation(
            "POST",
            sub + "/pause",
            "pause",
            "Pause a subscription",
            {200: Answer("Its status.", "Status"), **_errors(*common, 404)},
            params=(_ID,),
        ),
        Operation(
            "POST",
            sub + "/resume",
            "resume",
            "Resume a paused subscription",
            {200: Answer("Its status.", "Status"), **_errors(*common, 404)},
            params=(_ID,),
        ),
        Operation(
            "POST",
            member + "/heartbeat",
            "heartbeat",
            "Join the consumer group or stay in it (claims partition leases)",
            {200: Answer("The member's leases.", "Leases"), **_errors(*common, 404, 415)},
            body="Heartbeat",
            body_required=False,
            params=(_ID, _WORKER),
            tags=("consumer groups",),
        ),
        Operation(
            "GET",
            member + "/events",
            "member_events",
            "A page of events of the member's partitions",
            {200: Answer("The page.", "Page"), **_errors(*common, 404, 409, 410)},
            params=(_ID, _WORKER, limit),
            tags=("consumer groups",),
        ),
        Operation(
            "POST",
            member + "/ack",
            "member_ack",
            "Acknowledge a partition up to an offset under a lease epoch",
            {200: Answer("The acked offset.", "Acked"), **_errors(*common, 404, 409, 415)},
            body="MemberAck",
            params=(_ID, _WORKER),
            tags=("consumer groups",),
        ),
        Operation(
            "DELETE",
            member,
            "member_leave",
            "Leave the consumer group (releases the member's leases)",
            {200: Answer("Left.", "Left"), **_errors(*common, 404)},
            params=(_ID, _WORKER),
            tags=("consumer groups",),
        ),
    )


def _ref(name: str) -> str:
    return f"#/components/schemas/{name}"


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "tags": list(op.tags),
        "responses": {},
    }
    if op.description:
        out["description"] = op.description
    if op.params:
        out["parameters"] = [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required,
                "description": p.description,
                "schema": dict(p.schema),
            }
            for p in op.params
        ]
    if op.body is not None:
        out["requestBody"] = {
            "required": op.body_required,
            "content": {_JSON: {"schema": {"$ref": _ref(op.body)}}},
        }
    out["security"] = {
        "none": [],
        "bearer": [{"bearer": []}],
        "operator": [{"bearer": []}],
        "stream": [{"bearer": []}, {"streamToken": []}],
    }[op.auth]
    for status, answer in op.answers.items():
        resp: dict[str, Any] = {"description": answer.description}
        if answer.schema is not None:
            schema = (
                {"$ref": _ref(answer.schema)}
                if isinstance(answer.schema, str)
                else dict(answer.schema)
            )
            resp["content"] = {answer.media: {"schema": schema}}
        if status == 401:
            resp["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}
            }
        out["responses"][str(status)] = resp
    return out


def _links(op: Operation, ops: tuple[Operation, ...]) -> dict[int, dict[str, Any]]:
    """What a client may call next with what an answer gave it: a new subscription's id
    (every operation on a subscription), a member's id and worker (the member's
    operations)."""
    if op.name == "create":
        nxt = [o for o in ops if _ID in o.params]
        values = {"id": "$response.body#/id"}
        status = 201
    elif op.name == "heartbeat":
        nxt = [o for o in ops if _WORKER in o.params and o is not op]
        values = {"id": "$request.path.id", "worker": "$request.path.worker"}
        status = 200
    else:
        return {}
    return {status: {o.name: {"operationId": o.name, "parameters": dict(values)} for o in nxt}}


def document(max_limit: int = 10_000, *, title: str = "reventless gateway") -> dict[str, Any]:
    """The OpenAPI 3.1 document of the gateway's routes (``operations(max_limit)``)."""
    paths: dict[str, dict[str, Any]] = {}
    ops = operations(max_limit)
    for op in ops:
        out = paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
        for status, links in _links(op, ops).items():
            out["responses"][str(status)]["links"] = links
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": "1",
            "description": "Durable subscriptions to reventless topics over JSON and "
            "Server-Sent Events, with consumer groups and bearer tokens scoped to tenants. "
            'Errors are JSON `{"error", "detail"}`.',
        },
        "tags": [
            {"name": "gateway", "description": "Health, this document, metrics."},
            {"name": "subscriptions", "description": "A subscription's lifecycle and events."},
            {"name": "consumer groups", "description": "Workers sharing a subscription."},
        ],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token the gateway maps to a tenant (or to every "
                    "tenant: an operator token).",
                },
                "streamToken": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "access_token",
                    "description": "A stream token (POST /subscriptions/{id}/stream-tokens).",
                },
            },
        },
    }


__all__ = ["SCHEMAS", "Answer", "Auth", "Operation", "Param", "document", "operations"]
