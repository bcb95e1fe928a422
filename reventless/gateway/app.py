"""The gateway's ASGI app: JSON endpoints for the subscription lifecycle, an SSE stream per
subscription, consumer-group members, bearer tokens scoped to tenants.

Endpoints (all but ``/health`` and ``/openapi.json`` need ``Authorization: Bearer
<token>``; ``openapi.py`` lists them, with their inputs and answers, for both the routes
built here and the OpenAPI document)::

    GET    /health
    GET    /openapi.json                      the OpenAPI 3.1 document of this API
    GET    /metrics                           Prometheus text (an operator token)
    GET    /topics
    POST   /subscriptions                     {"topic", "where"?, "columns"?, "types"?, "from"?}
    GET    /subscriptions
    GET    /subscriptions/{id}                status: state, acked, head, lag, horizon...
    DELETE /subscriptions/{id}                close
    GET    /subscriptions/{id}/events         ?from=&limit=&columns=a,b&types=X,Y
    GET    /subscriptions/{id}/stream         SSE; resumes after Last-Event-ID
                                              (or ?access_token=<stream token>)
    POST   /subscriptions/{id}/stream-tokens  -> {"token", "expires_at"} (streamtoken.py)
    POST   /subscriptions/{id}/ack            {"offset"}
    POST   /subscriptions/{id}/seek           {"offset"}
    POST   /subscriptions/{id}/pause | /resume
    POST   /subscriptions/{id}/members/{worker}/heartbeat   {"ttl"?}
    GET    /subscriptions/{id}/members/{worker}/events      ?limit=
    POST   /subscriptions/{id}/members/{worker}/ack         {"partition", "offset", "epoch"}
    DELETE /subscriptions/{id}/members/{worker}

A token maps to a tenant (it sees only that tenant's subscriptions and events) or to
``None`` (an operator token: every tenant); the mapping may hold a token's hash instead of
the token (``bearertoken.py``). Errors are JSON ``{"error": code, "detail"}``
with 400 (bad input), 401 (token), 403 (``/metrics`` with a tenant's token), 404 (unknown
id or route, or another tenant's), 405, 409 (ack beyond the head, lost lease), 410
(resnapshot required), 413 (body beyond ``max_body_bytes``), 415 (a body that is not
JSON); input is checked before anything is stored (``parse.py``). An unexpected failure
is logged and answered with a JSON 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import UnauthorizedError
from ..subscribe import (
    BadRequestError,
    PredicateError,
    Retention,
    SubscriptionError,
    Subscriptions,
)
from . import sse
from .bearertoken import BearerTokens
from .openapi import document, operations
from .parse import (
    check_fields,
    check_length,
    check_url,
    json_body,
    json_int,
    last_event_id,
    query_int,
    query_list,
)
from .streamtoken import StreamTokens

log = logging.getLogger("reventless.gateway")
Handler = Callable[[Request, str | None], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """``poll_interval``: seconds between store polls of an idle stream, a fallback: a
    commit wakes streams at once (PostgreSQL: LISTEN/NOTIFY; a SQLite file: a
    ``PRAGMA data_version`` probe every 5 ms); ``keepalive``: seconds between comment lines on
    an idle stream; ``stream_batch``: events per store read of a stream;
    ``backpressure_lag``: lag above which a stream emits ``backpressure`` frames (the rule
    is in ``sse.py``); ``retention_interval``: seconds between retention runs (None:
    never); ``max_body_bytes``: the largest request body (413 beyond it);
    ``stream_token_ttl``: seconds a stream token stays valid; ``stream_token_key``: the
    key (at least 16 bytes) stream tokens are signed with (None: derived from the tokens,
    or random per process when they are all hashes, see ``create_app``); ``cors_origins``:
    browser origins allowed to call the gateway (``("*",)``: any), none by default."""

    poll_interval: float = 0.25
    keepalive: float = 15.0
    stream_batch: int = 500
    backpressure_lag: int = 10_000
    max_limit: int = 10_000
    retention_interval: float | None = None
    max_body_bytes: int = 1 << 20
    stream_token_ttl: float = 300.0
    stream_token_key: bytes | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()


#: Subscription ids a client may choose: URL-safe, at most 64 characters.
_ID = re.compile(r"[A-Za-z0-9._~-]{1,64}")


def _page_response(content: object) -> Response:
    """A page as JSON written as the stream writes events: a stored NaN or infinity
    float is sent as the token ``NaN`` / ``Infinity`` (Python's json), never a 500."""
    return Response(
        json.dumps(content, ensure_ascii=False, separators=(",", ":")),
        media_type="application/json",
    )


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


class _Waker:
    """Streams wait here for a commit (PostgreSQL NOTIFY), the poll interval or the
    gateway's shutdown (``close``)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.closed = False
        self.changes = 0  # notifications so far

    def notify(self, _payload: str = "") -> None:
        self.changes += 1
        self._event.set()
        self._event = asyncio.Event()

    def follower(self) -> Callable[[float], Awaitable[None]]:
        """One stream's ``wait``: it returns at once when a commit was signalled since it
        last returned (the stream was reading then, and that read may have missed it)."""
        seen = self.changes

        async def wait(timeout: float) -> None:
            nonlocal seen
            if self.changes == seen:
                await self.wait(timeout)
            seen = self.changes

        return wait

    def close(self) -> None:
        self.closed = True
        self.notify()

    def is_closed(self) -> bool:
        return self.closed

    async def wait(self, timeout: float) -> None:
        if self.closed:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: 3.11's can eat a cancel
                await self._event.wait()


class Gateway(Starlette):
    """The gateway's ASGI app (built by ``create_app``)."""

    def __init__(self, waker: _Waker, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._waker = waker

    def close_streams(self) -> None:
        """End every open SSE stream with a ``closed`` frame (reason ``shutdown``), now and
        for streams opened later; ``serve`` calls it when the server stops."""
        self._waker.close()


def create_app(
    store: str | Subscriptions,
    *,
    tokens: Mapping[str, str | None],
    options: GatewayOptions | None = None,
) -> Gateway:
    """The gateway for the store at ``store`` (a URL, or open ``Subscriptions``).

    ``tokens`` maps each bearer token (at least 8 characters), or its hash
    (``sha256$<hex>``, ``bearertoken.py``), to its tenant (``None``: every tenant);
    ``ReventlessError`` for a malformed one. Stream tokens are signed with
    ``options.stream_token_key``, else with a key derived from ``tokens``; when ``tokens``
    holds only hashes nothing in it is secret, so the key is random (stream tokens then
    die with the process and one replica's fail on another: give the key).
    """
    bearer = BearerTokens(tokens)
    opts = options or GatewayOptions()
    owned = isinstance(store, str)
    subs = (
        Subscriptions.from_url(store, max_limit=opts.max_limit) if isinstance(store, str) else store
    )
    waker = _Waker()
    if opts.stream_token_key is not None:
        stream_tokens = StreamTokens(opts.stream_token_key, ttl=opts.stream_token_ttl)
    elif bearer.plain:
        stream_tokens = StreamTokens.derived(tokens, ttl=opts.stream_token_ttl)
    else:  # a key derived from hashes would let whoever reads the file forge tokens
        stream_tokens = StreamTokens(secrets.token_bytes(32), ttl=opts.stream_token_ttl)
    max_body = opts.max_body_bytes

    def tenant_of(request: Request) -> tuple[bool, str | None]:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False, None
        return bearer.tenant_of(given.strip())

    def endpoint(
        fn: Handler, *, stream_token: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            try:
                check_length(request, max_body)  # 413 before reading, before anything else
                check_url(request)
                given = request.query_params.get("access_token") if stream_token else None
                if given is not None:
                    tenant = stream_tokens.check(given, request.path_params["id"])
                else:
                    ok, tenant = tenant_of(request)
                    if not ok:
                        raise UnauthorizedError("a valid bearer token is required")
                return await fn(request, tenant)
            except PredicateError as exc:
                return _error(400, "bad_predicate", str(exc))
            except SubscriptionError as exc:
                resp = _error(exc.status, exc.code, str(exc))
                if isinstance(exc, UnauthorizedError):
                    resp.headers["WWW-Authenticate"] = "Bearer"
                return resp

        return wrapped

    async def body(request: Request, *fields: str, optional: bool = False) -> dict[str, Any]:
        data = await json_body(request, max_bytes=max_body, optional=optional)
        check_fields(data, set(fields))
        return data

    async def status_json(sub_id: str, tenant: str | None) -> dict[str, Any]:
        return (await subs.status(sub_id, tenant=tenant)).as_json()

    # -- endpoints -------------------------------------------------------------------------

    async def health(_: Request) -> Response:
        return JSONResponse({"ok": True})

    async def topics(_: Request, tenant: str | None) -> Response:
        infos = await subs.topics()
        return JSONResponse(
            [
                {"name": i.name, "partitions": i.partitions, "columns": i.event_columns}
                for i in infos.values()
                if tenant is None or i.tenant in (None, tenant)
            ]
        )

    async def create(request: Request, tenant: str | None) -> Response:
        data = await body(request, "topic", "where", "columns", "types", "from", "id")
        topic = data.get("topic")
        if not isinstance(topic, str):
            raise BadRequestError("topic (a string) is required")
        where = data.get("where")
        if where is not None and not isinstance(where, str):
            raise BadRequestError("where must be a string")
        for name in ("columns", "types"):
            v = data.get(name)
            if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise BadRequestError(f"{name} must be a list of strings")
        start = data.get("from", 1)
        if start != "latest":  # "latest" or an offset
            start = json_int({"from": start}, "from", low=1)
        sub_id = data.get("id")
        if sub_id is not None and not (isinstance(sub_id, str) and _ID.fullmatch(sub_id)):
            raise BadRequestError("id must be 1..64 characters of A-Z a-z 0-9 . _ ~ -")
        sub = await subs.create(
            topic,
            where=where,
            columns=data.get("columns"),
            types=data.get("types"),
            tenant=tenant,
            from_offset=start,
            id=sub_id,
        )
        return JSONResponse(await status_json(sub.id, tenant), status_code=201)

    async def listing(_: Request, tenant: str | None) -> Response:
        return JSONResponse([s.id for s in await subs.list(tenant=tenant)])

    async def status(request: Request, tenant: str | None) -> Response:
        return JSONResponse(await status_json(request.path_params["id"], tenant))

    async def close(request: Request, tenant: str | None) -> Response:
        sub = await subs.close(request.path_params["id"], tenant=tenant)
        return JSONResponse({"id": sub.id, "state": sub.state})

    async def events(request: Request, tenant: str | None) -> Response:
        page = await subs.poll(
            request.path_params["id"],
            from_offset=query_int(request, "from", None, low=1),
            limit=query_int(request, "limit", 100, low=1, high=subs.max_limit) or 0,
            tenant=tenant,
            columns=query_list(request, "columns"),
            types=query_list(request, "types"),
        )
        return _page_response(page.as_json())

    async def ack(request: Request, tenant: str | None) -> Response:
        offset = json_int(await body(request, "offset"), "offset", low=0)
        acked = await subs.ack(request.path_params["id"], offset, tenant=tenant)
        return JSONResponse({"acked": acked})

    async def seek(request: Request, tenant: str | None) -> Response:
        offset = json_int(await body(request, "offset"), "offset", low=0)
        acked = await subs.seek(request.path_params["id"], offset, tenant=tenant)
        return JSONResponse({"acked": acked})

    async def pause(request: Request, tenant: str | None) -> Response:
        await subs.pause(request.path_params["id"], tenant=tenant)
        return JSONResponse(await status_json(request.path_params["id"], tenant))

    async def resume(request: Request, tenant: str | None) -> Response:
        await subs.resume(request.path_params["id"], tenant=tenant)
        return JSONResponse(await status_json(request.path_params["id"], tenant))

    async def stream(request: Request, tenant: str | None) -> Response:
        sub_id = request.path_params["id"]
        sub = await subs.get(sub_id, tenant=tenant)  # 404 before the stream starts
        last = last_event_id(request)
        start = query_int(request, "from", None, low=1) if last is None else last + 1
        if start is None:
            start = sub.acked + 1
        columns, types = query_list(request, "columns"), query_list(request, "types")
        subs.check_columns(await subs.topic(sub.topic), columns)
        # a first poll validates everything else (and may say resnapshot) before the 200
        await subs.poll(
            sub_id, from_offset=start, limit=1, tenant=tenant, columns=columns, types=types
        )
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if request.method == "HEAD":  # the headers only: a stream would never end
            return Response(media_type="text/event-stream", headers=headers)
        frames = sse.stream(
            subs,
            sub_id,
            tenant=tenant,
            start=start,
            batch=opts.stream_batch,
            columns=columns,
            types=types,
            wait=waker.follower(),
            poll_interval=opts.poll_interval,
            keepalive=opts.keepalive,
            backpressure_lag=opts.backpressure_lag,
            stopped=waker.is_closed,
        )
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)

    async def mint_stream_token(request: Request, tenant: str | None) -> Response:
        await body(request, optional=True)  # no fields: refuse what it does not take
        sub = await subs.get(request.path_params["id"], tenant=tenant)  # 404 for others
        token, expires_at = stream_tokens.mint(sub.id, tenant)
        return JSONResponse({"token": token, "expires_at": expires_at}, status_code=201)

    async def heartbeat(request: Request, tenant: str | None) -> Response:
        data = await body(request, "ttl", optional=True)
        ttl = data.get("ttl", 10.0)
        if not isinstance(ttl, int | float) or isinstance(ttl, bool):
            raise BadRequestError("ttl must be a number of seconds")
        member = subs.member(
            request.path_params["id"], request.path_params["worker"], ttl=float(ttl), tenant=tenant
        )
        return JSONResponse((await member.heartbeat()).as_json())

    async def member_events(request: Request, tenant: str | None) -> Response:
        member = subs.member(
            request.path_params["id"], request.path_params["worker"], tenant=tenant
        )
        page = await member.poll(
            limit=query_int(request, "limit", 100, low=1, high=subs.max_limit) or 0
        )
        return _page_response(page.as_json())

    async def member_ack(request: Request, tenant: str | None) -> Response:
        data = await body(request, "partition", "offset", "epoch")
        partition, offset, epoch = (
            json_int(data, n, low=0) for n in ("partition", "offset", "epoch")
        )
        member = subs.member(
            request.path_params["id"], request.path_params["worker"], tenant=tenant
        )
        acked = await member.ack(partition, offset, epoch)
        return JSONResponse({"acked": acked})

    async def member_leave(request: Request, tenant: str | None) -> Response:
        member = subs.member(
            request.path_params["id"], request.path_params["worker"], tenant=tenant
        )
        await member.leave()
        return JSONResponse({"left": True})

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await subs.open()  # creates the tables; opens the database if it is ours
        subs.store.on_commit(waker.notify)  # wake streams on commit (NOTIFY, data_version)
        task = None
        if opts.retention_interval:
            task = asyncio.get_running_loop().create_task(
                _retention_loop(Retention(subs.db), opts.retention_interval, waker)
            )
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if owned:
                await subs.shutdown()

    async def openapi(_: Request) -> Response:
        return JSONResponse(api_document)

    async def metrics(_: Request, tenant: str | None) -> Response:
        if tenant is not None:  # metrics span every tenant's topics
            return _error(403, "forbidden", "metrics need an operator token (no tenant)")
        from ..telemetry import prometheus_text  # the prometheus extra is optional

        body, content_type = prometheus_text()
        return Response(body, headers={"Content-Type": content_type})

    api = operations(opts.max_limit)
    api_document = document(opts.max_limit)
    public: dict[str, Callable[[Request], Awaitable[Response]]] = {
        "health": health,
        "openapi": openapi,
    }
    guarded: dict[str, Handler] = {
        "metrics": metrics,
        "topics": topics,
        "create": create,
        "listing": listing,
        "status": status,
        "close": close,
        "events": events,
        "stream": stream,
        "mint_stream_token": mint_stream_token,
        "ack": ack,
        "seek": seek,
        "pause": pause,
        "resume": resume,
        "heartbeat": heartbeat,
        "member_events": member_events,
        "member_ack": member_ack,
        "member_leave": member_leave,
    }
    routes = [
        Route(
            op.path,
            public[op.name]
            if op.auth == "none"
            else endpoint(guarded[op.name], stream_token=op.auth == "stream"),
            methods=[op.method],
            name=op.name,
        )
        for op in api
    ]
    middleware = []
    if opts.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(opts.cors_origins),
                allow_methods=["GET", "POST", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            )
        )
    return Gateway(
        waker,
        routes=routes,
        lifespan=lifespan,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )


async def _http_error(_: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, wrong method) in the gateway's JSON format."""
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    return JSONResponse(
        {"error": code, "detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    """The last resort: a bug answered as JSON (and logged with its traceback)."""
    log.error("%s %s failed: %r", request.method, request.url.path, exc)
    return _error(500, "internal", "the gateway failed; the error is logged")


async def _retention_loop(retention: Retention, interval: float, waker: _Waker) -> None:
    await retention.open()
    while True:
        try:
            deleted = await retention.apply()
            if any(deleted.values()):
                log.info("retention deleted %s", deleted)
                waker.notify()
        except Exception:
            log.exception("retention run failed")
        await asyncio.sleep(interval)
