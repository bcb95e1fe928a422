"""The gateway's OpenAPI document: every route is in it (one table builds both), it is a
valid OpenAPI 3.1 document, a live gateway serves it, and the answers it names for
``/metrics`` and the SSE stream are what the gateway sends."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Route

from reventless.gateway import GatewayOptions, create_app
from reventless.gateway.openapi import document, operations
from reventless.telemetry import prometheus_text
from tests.gateway.conftest import TOKENS, auth, serve
from tests.subscribe.conftest import order_rows, orders_app


def test_every_route_is_documented_and_every_operation_routed(tmp_path: object) -> None:
    app = create_app("sqlite://", tokens=TOKENS, options=GatewayOptions(max_limit=500))
    routed = set()
    for route in app.routes:
        assert isinstance(route, Route), route
        for method in route.methods or ():
            if method != "HEAD":  # Starlette answers HEAD for every GET
                routed.add((route.path, method.lower()))
    doc = document(500)
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert routed == documented
    assert len(documented) == len(operations()) == 19
    limit = next(
        p
        for p in doc["paths"]["/subscriptions/{id}/events"]["get"]["parameters"]
        if p["name"] == "limit"
    )
    assert limit["schema"]["maximum"] == 500


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    validate(doc)  # openapi-spec-validator: raises on an invalid document
    assert doc["openapi"] == "3.1.0"
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            public = path in ("/health", "/openapi.json")
            assert (op["security"] == []) == public, (method, path)
            if not public:
                errors = {s: r for s, r in op["responses"].items() if s >= "400"}
                assert {"400", "401", "500"} <= set(errors), (method, path)
                assert all(
                    r["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
                    for r in errors.values()
                )
    stream = doc["paths"]["/subscriptions/{id}/stream"]["get"]
    assert list(stream["responses"]["200"]["content"]) == ["text/event-stream"]
    assert stream["security"] == [{"bearer": []}, {"streamToken": []}]


def test_the_validator_refuses_a_broken_document() -> None:
    doc = document()
    doc["paths"]["/health"]["get"]["responses"] = {"200": {"content": {}}}  # no description
    with pytest.raises(Exception, match="description"):
        validate(doc)


async def test_live_gateway_serves_its_document_metrics_and_stream(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/g.db"
    app, topic = orders_app(url)
    async with app, serve(url) as base, httpx.AsyncClient(base_url=base) as http:
        await topic.publish(order_rows(3))
        r = await http.get("/openapi.json")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == document(GatewayOptions().max_limit)
        # /metrics: Prometheus text for an operator token; a tenant's gets a JSON 403
        r = await http.get("/metrics", headers=auth("operator-token"))
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/plain")
        _, content_type = prometheus_text()
        assert r.headers["content-type"] == content_type
        list(text_string_to_metric_families(r.text))  # raises on a malformed exposition
        r = await http.get("/metrics", headers=auth("acme-token-1"))
        assert (r.status_code, r.json()["error"]) == (403, "forbidden")
        r = await http.get("/metrics")
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized")
        # the SSE stream answers as documented
        op = auth("operator-token")
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=op)).json()["id"]
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=op) as s:
            assert s.status_code == 200
            assert s.headers["content-type"].startswith("text/event-stream")
            lines = s.aiter_lines()
            async with asyncio.timeout(10):
                while (line := await anext(lines)) != "id: 1":
                    assert not line.startswith("id:"), line
                assert await anext(lines) == "event: event"
