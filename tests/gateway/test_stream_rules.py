"""The stream's rules: backpressure checked when it opens (a client that connects far
behind hears it before any event) and after each page; ``closed`` frames say why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx

from examples.search_index.sse import SseEvent, read_events
from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

OPERATOR = auth("operator-token")


async def _until(events: AsyncIterator[SseEvent], stop: str) -> list[SseEvent]:
    out: list[SseEvent] = []
    while not out or out[-1].event != stop:
        out.append(await anext(events))
    return out


async def test_a_client_beyond_the_lag_threshold_hears_backpressure_at_once(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with (
        app,
        serve(db_url, backpressure_lag=5) as base,  # stream_batch 500: one page holds all
        httpx.AsyncClient(base_url=base, timeout=10) as http,
    ):
        await topic.publish(order_rows(12))
        sid = (
            await http.post("/subscriptions", json={"topic": "orders"}, headers=OPERATOR)
        ).json()["id"]
        stream = f"/subscriptions/{sid}/stream"
        async with http.stream("GET", stream, headers=OPERATOR) as r:
            events = read_events(r)
            first = await asyncio.wait_for(anext(events), 10)
            assert (first.event, first.json()) == ("backpressure", {"backlog": 12, "head": 12})
            seen = await asyncio.wait_for(_until(events, "event"), 10)
            while seen[-1].id != "12":
                seen.append(await asyncio.wait_for(anext(events), 10))
            assert [e.event for e in seen] == ["event"] * 12, "caught up: no more frames"
        # within the threshold (lag 12 - 8 = 4): no frame, the events come at once
        headers = {**OPERATOR, "Last-Event-ID": "8"}
        async with http.stream("GET", stream, headers=headers) as r:
            first = await asyncio.wait_for(anext(read_events(r)), 10)
            assert (first.event, first.id) == ("event", "9")
        # exactly at the threshold (12 - 7 = 5): none either; one past it (6): the frame
        async with http.stream("GET", f"{stream}?from=8", headers=OPERATOR) as r:
            assert (await asyncio.wait_for(anext(read_events(r)), 10)).event == "event"
        async with http.stream("GET", f"{stream}?from=7", headers=OPERATOR) as r:
            first = await asyncio.wait_for(anext(read_events(r)), 10)
            assert (first.event, first.json()["backlog"]) == ("backpressure", 6)


async def test_closing_a_subscription_ends_its_stream_with_reason_closed(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
        await topic.publish(order_rows(2))
        sid = (
            await http.post("/subscriptions", json={"topic": "orders"}, headers=OPERATOR)
        ).json()["id"]
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=OPERATOR) as r:
            events = read_events(r)
            await asyncio.wait_for(_until(events, "event"), 10)
            await http.delete(f"/subscriptions/{sid}", headers=OPERATOR)
            got = await asyncio.wait_for(_until(events, "closed"), 10)
            assert got[-1].json() == {"id": sid, "reason": "closed"}


async def test_stopping_the_server_ends_open_streams_with_closed(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, httpx.AsyncClient(timeout=10) as http:
        await topic.publish(order_rows(2))
        frames: list[SseEvent] = []
        async with serve(db_url) as base:
            sid = (
                await http.post(f"{base}/subscriptions", json={"topic": "orders"}, headers=OPERATOR)
            ).json()["id"]
            r = await http.send(
                http.build_request("GET", f"{base}/subscriptions/{sid}/stream", headers=OPERATOR),
                stream=True,
            )
            events = read_events(r)
            frames += await asyncio.wait_for(_until(events, "event"), 10)
            frames.append(await asyncio.wait_for(anext(events), 10))
        # the server stopped (serve's block ended) with the client still connected
        async for e in events:
            frames.append(e)
        await r.aclose()
        assert frames[-1].event == "closed"
        assert frames[-1].json() == {"id": sid, "reason": "shutdown"}


async def test_head_on_a_stream_answers_with_headers_at_once(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=5) as http:
        await topic.publish(order_rows(2))
        sid = (
            await http.post("/subscriptions", json={"topic": "orders"}, headers=OPERATOR)
        ).json()["id"]
        r = await http.head(f"/subscriptions/{sid}/stream", headers=OPERATOR)
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        r = await http.head("/subscriptions/nope/stream", headers=OPERATOR)
        assert r.status_code == 404
