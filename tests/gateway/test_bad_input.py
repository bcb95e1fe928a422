"""Every malformed request gets a JSON 4xx with a typed code, never a 500, and nothing in
the store changes (read back after the barrage)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from reventless.subscribe import BadRequestError, Subscriptions
from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

ACME, GLOBEX, OPERATOR = auth("acme-token-1"), auth("globex-token-1"), auth("operator-token")
HUGE = "99999999999999999999999"
JSON = {"Content-Type": "application/json"}


async def _state(url: str) -> list[tuple[Any, ...]]:
    """Every open subscription with its state, cursor and group partitions."""
    async with Subscriptions.from_url(url) as subs:
        out = []
        for sub in await subs.list():
            st = await subs.status(sub.id)
            out.append((sub.id, sub.state, sub.acked, sub.tenant, st.partitions))
        return sorted(out)


async def test_bad_input_gets_a_json_4xx_and_changes_nothing(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=2)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        await topic.publish(order_rows(10))
        r = await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)
        sid = r.json()["id"]
        m = f"/subscriptions/{sid}/members"
        assert (await http.post(f"{m}/w1/heartbeat", headers=ACME)).status_code == 200
        before = await _state(db_url)
        s = f"/subscriptions/{sid}"
        deep = "[" * 100_000 + "]" * 100_000
        # (method, path, raw body or None, extra headers, status, code)
        bad: list[tuple[str, str, bytes | None, dict[str, Any], int, str]] = [
            # integers beyond the store's range, negative, not ASCII digits
            ("GET", f"{s}/events?from={HUGE}", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?from=9223372036854775808", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?from=-1", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?from=0", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?from=%D9%A1%D9%A2", None, {}, 400, "bad_request"),  # ١٢
            ("GET", f"{s}/events?from=1_0", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?limit={HUGE}", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?limit=-3", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?from=" + "9" * 5000, None, {}, 400, "bad_request"),
            ("GET", f"{s}/stream?from={HUGE}", None, {}, 400, "bad_request"),
            ("GET", f"{s}/stream?from=0", None, {}, 400, "bad_request"),
            ("GET", f"{s}/stream", None, {"Last-Event-ID": HUGE}, 400, "bad_request"),
            (
                "GET",
                f"{s}/stream",
                None,
                {"Last-Event-ID": "9223372036854775807"},
                400,
                "bad_request",
            ),
            ("GET", f"{s}/stream", None, {"Last-Event-ID": "-1"}, 400, "bad_request"),
            ("GET", f"{s}/stream", None, {"Last-Event-ID": b"\xb2"}, 400, "bad_request"),  # ²
            ("GET", f"{s}/stream", None, {"Last-Event-ID": "abc"}, 400, "bad_request"),
            ("GET", f"{s}/stream?columns=", None, {}, 400, "bad_request"),
            ("GET", f"{m}/w1/events?limit={HUGE}", None, {}, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": %s}' % HUGE.encode(), JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": -1}', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": true}', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": 1.0}', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": NaN}', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": 1' + b"0" * 5000 + b"}", JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": 1, "pad": 1}', JSON, 400, "bad_request"),
            ("POST", f"{s}/seek", b'{"offset": %s}' % HUGE.encode(), JSON, 400, "bad_request"),
            ("POST", f"{s}/seek", b'{"offset": -5}', JSON, 400, "bad_request"),
            # deeply nested, invalid UTF-8, lone surrogates, not JSON, not an object
            ("POST", f"{s}/ack", b'{"offset": ' + deep.encode() + b"}", JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", deep.encode(), JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'{"offset": "\xff\xfe"}', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b"\xef\xbb\xbf{}", JSON, 400, "bad_request"),
            (
                "POST",
                f"{s}/ack",
                b'{"offset": 1}',
                {"Content-Type": "text/plain"},
                415,
                "unsupported_media_type",
            ),
            (
                "POST",
                f"{s}/ack",
                b"offset=1",
                {"Content-Type": "application/x-www-form-urlencoded"},
                415,
                "unsupported_media_type",
            ),
            ("POST", f"{s}/ack", b"", JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b"[1]", JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b"null", JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b'"x"', JSON, 400, "bad_request"),
            ("POST", f"{s}/ack", b"7", JSON, 400, "bad_request"),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "id": "\\ud800"}',
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "where": "name = \'\\udfff\'"}',
                JSON,
                400,
                "bad_request",
            ),
            ("POST", "/subscriptions", b'{"topic": "\\ud800"}', JSON, 400, "bad_request"),
            # create: every field typed and bounded
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "from": %s}' % HUGE.encode(),
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "from": true}',
                JSON,
                400,
                "bad_request",
            ),
            ("POST", "/subscriptions", b'{"topic": "orders", "from": 0}', JSON, 400, "bad_request"),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "from": "earliest"}',
                JSON,
                400,
                "bad_request",
            ),
            ("POST", "/subscriptions", b'{"topic": "orders", "id": 5}', JSON, 400, "bad_request"),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "id": "a/b"}',
                JSON,
                400,
                "bad_request",
            ),
            ("POST", "/subscriptions", b'{"topic": "orders", "id": ""}', JSON, 400, "bad_request"),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "id": "%s"}' % (b"x" * 65),
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "columns": "qty"}',
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "types": []}',
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "where": 5}',
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "where": "' + b"(" * 3000 + b"qty = 1" + b")" * 3000 + b'"}',
                JSON,
                400,
                "bad_predicate",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "where": "qty = ' + HUGE.encode() + b'"}',
                JSON,
                400,
                "bad_predicate",
            ),
            ("POST", "/subscriptions", b'{"topic": ["orders"]}', JSON, 400, "bad_request"),
            ("POST", "/subscriptions", b"{}", JSON, 400, "bad_request"),
            # group members
            (
                "POST",
                f"{m}/w1/ack",
                b'{"partition": %s, "offset": 1, "epoch": 1}' % HUGE.encode(),
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                f"{m}/w1/ack",
                b'{"partition": 0, "offset": 1, "epoch": -1}',
                JSON,
                400,
                "bad_request",
            ),
            ("POST", f"{m}/w1/ack", b'{"partition": 0, "offset": 1}', JSON, 400, "bad_request"),
            ("POST", f"{m}/w1/heartbeat", b'{"ttl": "x"}', JSON, 400, "bad_request"),
            ("POST", f"{m}/w1/heartbeat", b'{"ttl": 1e400}', JSON, 400, "bad_request"),
            ("POST", f"{m}/w1/heartbeat", b'{"ttl": -1}', JSON, 400, "bad_request"),
            ("POST", f"{m}/w1/heartbeat", b'{"ttl": 5, "x": 1}', JSON, 400, "bad_request"),
            ("POST", f"{m}/{'w' * 201}/heartbeat", None, {}, 400, "bad_request"),
            ("GET", f"{m}/{'w' * 201}/events", None, {}, 400, "bad_request"),
            # stream tokens: a body it does not take, another tenant's subscription
            ("POST", f"{s}/stream-tokens", b'{"ttl": 5}', JSON, 400, "bad_request"),
            ("POST", f"{s}/stream-tokens", b"{}", {**JSON, **GLOBEX}, 404, "not_found"),
            ("GET", f"{s}/stream?access_token=nope", None, {}, 401, "unauthorized"),
            ("GET", f"{s}/stream?access_token=acme-token-1", None, {}, 401, "unauthorized"),
            (
                "GET",
                f"{s}/events?access_token=acme-token-1",
                None,
                {"Authorization": ""},
                401,
                "unauthorized",
            ),
            # unknown ids and routes, wrong methods: JSON too
            ("GET", "/subscriptions/" + "x" * 5000, None, {}, 404, "not_found"),
            ("GET", "/subscriptions/%F0%9F%92%A9", None, {}, 404, "not_found"),
            ("GET", "/subscriptions/%ED%A0%80", None, {}, 404, "not_found"),
            # NUL characters (PostgreSQL text refuses them) anywhere
            ("GET", "/subscriptions/a%00b", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?columns=qty%00", None, {}, 400, "bad_request"),
            ("GET", f"{s}/events?types=orders%00", None, {}, 400, "bad_request"),
            ("GET", f"{s}/stream?access_token=%00", None, {}, 400, "bad_request"),
            ("POST", f"{m}/w%00/heartbeat", None, {}, 400, "bad_request"),
            ("POST", "/subscriptions", b'{"topic": "orders\\u0000"}', JSON, 400, "bad_request"),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "where": "name = \'\\u0000\'"}',
                JSON,
                400,
                "bad_request",
            ),
            (
                "POST",
                "/subscriptions",
                b'{"topic": "orders", "types": ["\\u0000"]}',
                JSON,
                400,
                "bad_request",
            ),
            ("GET", "/nope", None, {}, 404, "not_found"),
            ("DELETE", "/subscriptions", None, {}, 405, "method_not_allowed"),
            ("PUT", f"{s}/ack", b"{}", JSON, 405, "method_not_allowed"),
        ]
        for method, path, body, headers, status, code in bad:
            r = await http.request(method, path, content=body, headers={**ACME, **headers})
            assert r.status_code == status, (method, path[:80], body and body[:80], r.text[:300])
            assert r.headers["content-type"] == "application/json", (path[:80], r.text[:200])
            assert r.json()["error"] == code and r.json()["detail"], (path[:80], r.text[:300])
        assert await _state(db_url) == before, "a refused request changed nothing"
        # the edges of the ranges are accepted
        page = (await http.get(f"{s}/events?from=9223372036854775807", headers=ACME)).json()
        assert page["events"] == []
        r = await http.post(f"{s}/ack", content=b'{"offset": 0}', headers=ACME)
        assert r.json() == {"acked": 0}
        r = await http.post(f"{s}/ack", content=b'{"offset": 10}', headers=ACME)
        assert r.json() == {"acked": 10}, "no Content-Type: read as JSON"


async def test_subscriptions_refuse_offsets_beyond_the_store_in_process(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, Subscriptions.from_url(db_url) as subs:
        await topic.publish(order_rows(3))
        sub = await subs.create("orders")
        calls = [
            subs.poll(sub.id, from_offset=2**63),
            subs.ack(sub.id, 2**63),
            subs.seek(sub.id, 2**63),
            subs.create("orders", from_offset=2**63),
            subs.create("orders", from_offset=True),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(BadRequestError):
                await call
        assert [(s.id, s.acked) for s in await subs.list()] == [(sub.id, 0)]
