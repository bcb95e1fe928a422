"""The HTTP/SSE gateway end to end: a real uvicorn server on loopback, a real httpx client,
the store read back to prove what changed and what did not (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

import reventless as rv
from examples.search_index.sse import SseEvent, read_events
from reventless.subscribe import Retention, Subscriptions
from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

ACME, GLOBEX, OPERATOR = auth("acme-token-1"), auth("globex-token-1"), auth("operator-token")


async def _stored(url: str, sub_id: str) -> tuple[Any, ...]:
    async with Subscriptions.from_url(url) as subs:
        st = await subs.status(sub_id)
        return (st.subscription.state, st.subscription.acked, st.head)


async def test_lifecycle_and_bad_input_over_http(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base) as http:
        await topic.publish(order_rows(10))
        r = await http.post(
            "/subscriptions",
            json={"topic": "orders", "where": "qty >= 5", "columns": ["qty", "key"]},
            headers=ACME,
        )
        assert r.status_code == 201, r.text
        sub = r.json()
        assert (sub["state"], sub["acked"], sub["head"], sub["tenant"]) == ("active", 0, 10, "acme")
        sid = sub["id"]
        # the acme token sees no events: they were published without a tenant
        page = (await http.get(f"/subscriptions/{sid}/events", headers=ACME)).json()
        assert page["events"] == [] and page["next_offset"] == 11
        r = await http.post(
            "/subscriptions",
            json={"topic": "orders", "where": "qty >= 5", "columns": ["qty", "key"]},
            headers=OPERATOR,
        )
        oid = r.json()["id"]
        page = (await http.get(f"/subscriptions/{oid}/events?limit=3", headers=OPERATOR)).json()
        assert [(e["offset"], e["key"], e["data"]) for e in page["events"]] == [
            (6, "o-0", {"qty": 5}),
            (7, "o-1", {"qty": 6}),
            (8, "o-2", {"qty": 7}),
        ]
        assert (
            await http.post(f"/subscriptions/{oid}/ack", json={"offset": 8}, headers=OPERATOR)
        ).json() == {"acked": 8}
        assert (await http.post(f"/subscriptions/{oid}/pause", headers=OPERATOR)).json()[
            "state"
        ] == "paused"
        page = (await http.get(f"/subscriptions/{oid}/events", headers=OPERATOR)).json()
        assert page["events"] == [] and page["lag"] == 2 and page["state"] == "paused"
        await http.post(f"/subscriptions/{oid}/resume", headers=OPERATOR)
        page = (
            await http.get(f"/subscriptions/{oid}/events?types=orders", headers=OPERATOR)
        ).json()
        assert [e["offset"] for e in page["events"]] == [9, 10]

        before = (await _stored(db_url, sid), await _stored(db_url, oid))
        bad: list[tuple[str, str, dict[str, Any] | None, dict[str, str], int, str]] = [
            (
                "POST",
                "/subscriptions",
                {"topic": "orders", "where": "qty >"},
                ACME,
                400,
                "bad_predicate",
            ),
            (
                "POST",
                "/subscriptions",
                {"topic": "orders", "where": "x = 1; DROP TABLE ev_orders"},
                ACME,
                400,
                "bad_predicate",
            ),
            (
                "POST",
                "/subscriptions",
                {"topic": "orders", "columns": ["nope"]},
                ACME,
                400,
                "bad_request",
            ),
            ("POST", "/subscriptions", {"topic": "nope"}, ACME, 404, "unknown_topic"),
            ("GET", "/subscriptions/nope/events", None, ACME, 404, "not_found"),
            ("POST", f"/subscriptions/{sid}/ack", {"offset": 11}, ACME, 409, "ack_beyond_head"),
            ("POST", f"/subscriptions/{sid}/ack", {"offset": "3"}, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}/events?limit=-1", None, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}/events?limit=0", None, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}/events?limit=1000000", None, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}/events?limit=ten", None, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}/events?from=-5", None, ACME, 400, "bad_request"),
            ("GET", f"/subscriptions/{sid}", None, auth("wrong-token-x"), 401, "unauthorized"),
            ("GET", f"/subscriptions/{sid}", None, {}, 401, "unauthorized"),
            ("POST", f"/subscriptions/{sid}/ack", {"offset": 1}, GLOBEX, 404, "not_found"),
            ("POST", f"/subscriptions/{sid}/pause", None, GLOBEX, 404, "not_found"),
            ("DELETE", f"/subscriptions/{sid}", None, GLOBEX, 404, "not_found"),
            ("GET", f"/subscriptions/{sid}/stream", None, GLOBEX, 404, "not_found"),
            (
                "POST",
                f"/subscriptions/{oid}/seek",
                {"offset": 99},
                OPERATOR,
                409,
                "ack_beyond_head",
            ),
        ]
        for method, path, body, headers, status, code in bad:
            r = await http.request(method, path, json=body, headers=headers)
            assert (r.status_code, r.json()["error"]) == (status, code), (method, path, r.text)
            assert r.json()["detail"]
        r = await http.post("/subscriptions", content=b"{not json", headers=ACME)
        assert r.status_code == 400
        assert (await _stored(db_url, sid), await _stored(db_url, oid)) == before
        assert (await http.get("/subscriptions", headers=GLOBEX)).json() == []
        assert (await http.delete(f"/subscriptions/{sid}", headers=ACME)).status_code == 200
        assert (await http.get(f"/subscriptions/{sid}", headers=ACME)).status_code == 404


async def _read(events: AsyncIterator[SseEvent], n: int, out: list[SseEvent]) -> None:
    """Append frames to ``out`` until it holds ``n`` data events."""
    while sum(e.event == "event" for e in out) < n:
        out.append(await anext(events))


async def test_sse_reconnect_resumes_without_loss_or_duplicates(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=2)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
        await topic.publish(order_rows(30), meta=rv.Metadata(tenant="acme"))
        await topic.publish(order_rows(5, start=500), meta=rv.Metadata(tenant="globex"))
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)).json()[
            "id"
        ]
        first: list[SseEvent] = []
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=ACME) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            await asyncio.wait_for(_read(read_events(r), 12, first), 10)
        data = [e for e in first if e.event == "event"]
        last_id = data[-1].id
        assert last_id == str(data[-1].json()["offset"])
        # more events while the client is away, then reconnect from the last id it saw
        await topic.publish(order_rows(20, start=30), meta=rv.Metadata(tenant="acme"))
        second: list[SseEvent] = []
        headers = {**ACME, "Last-Event-ID": str(last_id)}
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=headers) as r:
            task = asyncio.create_task(_read(read_events(r), 60 - len(data), second))
            await asyncio.sleep(0.3)  # live: appended while the stream is open
            await topic.publish(order_rows(10, start=50), meta=rv.Metadata(tenant="acme"))
            await asyncio.wait_for(task, 10)
        got = [e.json() for e in data + [e for e in second if e.event == "event"]]
        qty = [e["data"]["qty"] for e in got]
        assert qty == list(range(60)), "every acme event exactly once, in order"
        assert {e["tenant"] for e in got} == {"acme"}
        assert [int(e.id or 0) for e in data + second if e.event == "event"] == [
            e["offset"] for e in got
        ]


async def test_sse_control_events_pause_and_resnapshot(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with (
        app,
        serve(db_url, backpressure_lag=5, stream_batch=4) as base,
        httpx.AsyncClient(base_url=base, timeout=10) as http,
    ):
        await topic.publish(order_rows(12))
        sid = (
            await http.post("/subscriptions", json={"topic": "orders"}, headers=OPERATOR)
        ).json()["id"]
        seen: list[SseEvent] = []
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=OPERATOR) as r:
            events = read_events(r)
            await asyncio.wait_for(_read(events, 12, seen), 10)
            assert any(e.event == "backpressure" and e.json()["backlog"] > 5 for e in seen)
            await http.post(f"/subscriptions/{sid}/pause", headers=OPERATOR)

            async def until(kind: str) -> None:
                while not seen or seen[-1].event != kind:
                    seen.append(await anext(events))

            # Wait for the frame before publishing: the pause's own commit wakes the stream,
            # so publishing right after the pause raced it (the frame's lag was 12 or 13).
            await asyncio.wait_for(until("paused"), 10)
            assert seen[-1].json()["lag"] == 12
            await topic.publish(order_rows(1, start=12))  # lands while paused
            status = (await http.get(f"/subscriptions/{sid}", headers=OPERATOR)).json()
            assert (status["state"], status["lag"]) == ("paused", 13)
            await http.post(f"/subscriptions/{sid}/resume", headers=OPERATOR)
            await asyncio.wait_for(until("event"), 10)
            assert [e.event for e in seen[-2:]] == ["resumed", "event"]
            assert seen[-1].id == "13"
        # retention overtakes the cursor (acked 0): an explicit 410, also for the stream
        retention = Retention(app.store.db)
        await retention.open()
        await retention.set("orders", max_count=3)
        await retention.apply()
        r2 = await http.get(f"/subscriptions/{sid}/events", headers=OPERATOR)
        assert r2.status_code == 410 and r2.json()["error"] == "resnapshot_required"
        r3 = await http.get(f"/subscriptions/{sid}/stream", headers=OPERATOR)
        assert r3.status_code == 410
        status = (await http.get(f"/subscriptions/{sid}", headers=OPERATOR)).json()
        assert status["resnapshot_required"] and status["horizon"] == 10
        await http.post(f"/subscriptions/{sid}/seek", json={"offset": 10}, headers=OPERATOR)
        page = (await http.get(f"/subscriptions/{sid}/events", headers=OPERATOR)).json()
        assert [e["offset"] for e in page["events"]] == [11, 12, 13]


async def test_group_members_over_http(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=2)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base) as http:
        await topic.publish(order_rows(10))
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)).json()[
            "id"
        ]
        m = f"/subscriptions/{sid}/members"
        leases = (await http.post(f"{m}/w1/heartbeat", json={"ttl": 5}, headers=ACME)).json()
        assert leases["leases"] == {"0": 1, "1": 1}
        assert (await http.post(f"{m}/w1/heartbeat", headers=GLOBEX)).status_code == 404
        page = (await http.get(f"{m}/w1/events", headers=ACME)).json()
        assert page["events"] == []  # acme sees no untenanted events
        r = await http.post(
            f"{m}/w2/ack", json={"partition": 0, "offset": 1, "epoch": 1}, headers=ACME
        )
        assert (r.status_code, r.json()["error"]) == (409, "lease_lost")
        r = await http.post(
            f"{m}/w1/ack", json={"partition": 0, "offset": 10, "epoch": 1}, headers=ACME
        )
        assert r.json() == {"acked": 10}
        assert (await http.delete(f"{m}/w1", headers=ACME)).json() == {"left": True}
