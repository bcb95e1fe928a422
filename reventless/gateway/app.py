"""The gateway's ASGI app: JSON endpoints for the subscription lifecycle, an SSE stream per
subscription, consumer-group members, bearer tokens scoped to tenants.

Endpoints (all but ``/health`` need ``Authorization: Bearer <token>``)::

    GET    /health
    GET    /topics
    POST   /subscriptions                     {"topic", "where"?, "columns"?, "types"?, "from"?}
    GET    /subscriptions
    GET    /subscriptions/{id}                status: state, acked, head, lag, horizon...
    DELETE /subscriptions/{id}                close
    GET    /subscriptions/{id}/events         ?from=&limit=&columns=a,b&types=X,Y
    GET    /subscriptions/{id}/stream         SSE; resumes after Last-Event-ID
    POST   /subscriptions/{id}/ack            {"offset"}
    POST   /subscriptions/{id}/seek           {"offset"}
    POST   /subscriptions/{id}/pause | /resume
    POST   /subscriptions/{id}/members/{worker}/heartbeat   {"ttl"?}
    GET    /subscriptions/{id}/members/{worker}/events      ?limit=
    POST   /subscriptions/{id}/members/{worker}/ack         {"partition", "offset", "epoch"}
    DELETE /subscriptions/{id}/members/{worker}

A token maps to a tenant (it sees only that tenant's subscriptions and events) or to
``None`` (an operator token: every tenant). Errors are JSON ``{"error": code, "detail"}``
with 400 (bad input), 401 (token), 404 (unknown id, or another tenant's), 409 (ack beyond
the head, lost lease), 410 (resnapshot required).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import ReventlessError
from ..subscribe import (
    BadRequestError,
    PredicateError,
    Retention,
    SubscriptionError,
    Subscriptions,
)
from . import sse

log = logging.getLogger("reventless.gateway")
Handler = Callable[[Request, str | None], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class GatewayOptions:
    """``poll_interval``: seconds between store polls of an idle stream (PostgreSQL wakes
    streams at once through LISTEN/NOTIFY); ``keepalive``: seconds between comment lines on
    an idle stream; ``stream_batch``: events per store read of a stream;
    ``backpressure_lag``: backlog above which a stream emits ``backpressure`` events;
    ``retention_interval``: seconds between retention runs (None: never)."""

    poll_interval: float = 0.25
    keepalive: float = 15.0
    stream_batch: int = 500
    backpressure_lag: int = 10_000
    max_limit: int = 10_000
    retention_interval: float | None = None


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


class _Waker:
    """Streams wait here for a commit (PostgreSQL NOTIFY) or the poll interval."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self, _payload: str = "") -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # not wait_for: 3.11's can eat a cancel
                await self._event.wait()


def create_app(
    store: str | Subscriptions,
    *,
    tokens: Mapping[str, str | None],
    options: GatewayOptions | None = None,
) -> Starlette:
    """The gateway for the store at ``store`` (a URL, or open ``Subscriptions``).

    ``tokens`` maps each bearer token to its tenant (``None``: every tenant).
    """
    if not tokens or any(not isinstance(t, str) or len(t) < 8 for t in tokens):
        raise ReventlessError("the gateway needs bearer tokens of at least 8 characters")
    opts = options or GatewayOptions()
    owned = isinstance(store, str)
    subs = (
        Subscriptions.from_url(store, max_limit=opts.max_limit) if isinstance(store, str) else store
    )
    waker = _Waker()
    token_list = [(t.encode(), tenant) for t, tenant in tokens.items()]

    def tenant_of(request: Request) -> tuple[bool, str | None]:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False, None
        found: tuple[bool, str | None] = (False, None)
        for token, tenant in token_list:  # compare with every token: no timing hint
            if hmac.compare_digest(token, given.strip().encode()):
                found = (True, tenant)
        return found

    def endpoint(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            ok, tenant = tenant_of(request)
            if not ok:
                resp = _error(401, "unauthorized", "a valid bearer token is required")
                resp.headers["WWW-Authenticate"] = "Bearer"
                return resp
            try:
                return await fn(request, tenant)
            except PredicateError as exc:
                return _error(400, "bad_predicate", str(exc))
            except SubscriptionError as exc:
                return _error(exc.status, exc.code, str(exc))

        return wrapped

    async def body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequestError("the body must be a JSON object") from None
        if not isinstance(data, dict):
            raise BadRequestError("the body must be a JSON object")
        return data

    def q_int(request: Request, name: str, default: int | None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise BadRequestError(f"{name} must be an integer, got {raw!r}") from None

    def q_list(request: Request, name: str) -> list[str] | None:
        raw = request.query_params.get(name)
        return None if raw is None else [x.strip() for x in raw.split(",") if x.strip()]

    def j_int(data: Mapping[str, Any], name: str) -> int:
        v = data.get(name)
        if not isinstance(v, int) or isinstance(v, bool):
            raise BadRequestError(f"{name} must be an integer")
        return v

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
        data = await body(request)
        unknown = set(data) - {"topic", "where", "columns", "types", "from", "id"}
        if unknown:
            raise BadRequestError(f"unknown fields {sorted(unknown)}")
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
        sub = await subs.create(
            topic,
            where=where,
            columns=data.get("columns"),
            types=data.get("types"),
            tenant=tenant,
            from_offset=start,
            id=data.get("id") if isinstance(data.get("id"), str) else None,
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
            from_offset=q_int(request, "from", None),
            limit=q_int(request, "limit", 100) or 0,
            tenant=tenant,
            columns=q_list(request, "columns"),
            types=q_list(request, "types"),
        )
        return JSONResponse(page.as_json())

    async def ack(request: Request, tenant: str | None) -> Response:
        offset = j_int(await body(request), "offset")
        acked = await subs.ack(request.path_params["id"], offset, tenant=tenant)
        return JSONResponse({"acked": acked})

    async def seek(request: Request, tenant: str | None) -> Response:
        offset = j_int(await body(request), "offset")
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
        last = request.headers.get("last-event-id")
        if last is not None:
            if not last.strip().isdigit():
                raise BadRequestError(f"Last-Event-ID must be an offset, got {last!r}")
            start = int(last) + 1
        else:
            start = q_int(request, "from", None) or sub.acked + 1
        columns, types = q_list(request, "columns"), q_list(request, "types")
        subs.check_columns(await subs.topic(sub.topic), columns)
        # a first poll validates everything else (and may say resnapshot) before the 200
        await subs.poll(
            sub_id, from_offset=start, limit=1, tenant=tenant, columns=columns, types=types
        )
        frames = sse.stream(
            subs,
            sub_id,
            tenant=tenant,
            start=start,
            batch=opts.stream_batch,
            columns=columns,
            types=types,
            wait=waker.wait,
            poll_interval=opts.poll_interval,
            keepalive=opts.keepalive,
            backpressure_lag=opts.backpressure_lag,
        )
        return StreamingResponse(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def heartbeat(request: Request, tenant: str | None) -> Response:
        data = await body(request) if await request.body() else {}
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
        page = await member.poll(limit=q_int(request, "limit", 100) or 0)
        return JSONResponse(page.as_json())

    async def member_ack(request: Request, tenant: str | None) -> Response:
        data = await body(request)
        member = subs.member(
            request.path_params["id"], request.path_params["worker"], tenant=tenant
        )
        acked = await member.ack(
            j_int(data, "partition"), j_int(data, "offset"), j_int(data, "epoch")
        )
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
        subs.store.on_commit(waker.notify)  # PostgreSQL: wake streams on commit
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

    sub = "/subscriptions/{id}"
    member_path = sub + "/members/{worker}"
    routes = [
        Route("/health", health),
        Route("/topics", endpoint(topics)),
        Route("/subscriptions", endpoint(create), methods=["POST"]),
        Route("/subscriptions", endpoint(listing), methods=["GET"]),
        Route(sub, endpoint(status), methods=["GET"]),
        Route(sub, endpoint(close), methods=["DELETE"]),
        Route(sub + "/events", endpoint(events)),
        Route(sub + "/stream", endpoint(stream)),
        Route(sub + "/ack", endpoint(ack), methods=["POST"]),
        Route(sub + "/seek", endpoint(seek), methods=["POST"]),
        Route(sub + "/pause", endpoint(pause), methods=["POST"]),
        Route(sub + "/resume", endpoint(resume), methods=["POST"]),
        Route(member_path + "/heartbeat", endpoint(heartbeat), methods=["POST"]),
        Route(member_path + "/events", endpoint(member_events)),
        Route(member_path + "/ack", endpoint(member_ack), methods=["POST"]),
        Route(member_path, endpoint(member_leave), methods=["DELETE"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


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
