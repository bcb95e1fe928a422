"""Request bodies beyond ``GatewayOptions.max_body_bytes`` get 413 before they are read to
the end (a declared Content-Length at once, a chunked body once it passes the limit), and
the ack they carried is not stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx

from reventless.subscribe import Subscriptions
from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

ACME = auth("acme-token-1")
TEN_MB = 10 * 1024 * 1024


async def _acked(url: str, sub_id: str) -> int:
    async with Subscriptions.from_url(url) as subs:
        return (await subs.get(sub_id)).acked


def _padded_ack(offset: int, size: int) -> bytes:
    """An ack of ``offset`` padded with spaces to ``size`` bytes (valid JSON)."""
    head = b'{"offset": %d' % offset
    return head + b" " * (size - len(head) - 1) + b"}"


async def _raw_response(base: str, head: bytes, body: bytes) -> bytes:
    """Send the request head and part of a body, never the rest; what the server answers."""
    host, port = urlsplit(base).hostname, urlsplit(base).port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head)
        writer.write(body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


async def test_bodies_beyond_the_limit_get_413_and_store_nothing(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        await topic.publish(order_rows(10))
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)).json()[
            "id"
        ]
        path = f"/subscriptions/{sid}/ack"
        # 10 MB with a Content-Length
        r = await http.post(path, content=_padded_ack(5, TEN_MB), headers=ACME)
        assert (r.status_code, r.json()["error"]) == (413, "payload_too_large")

        # 10 MB chunked (no Content-Length)
        async def chunks() -> AsyncIterator[bytes]:
            body = _padded_ack(6, TEN_MB)
            for i in range(0, len(body), 64 * 1024):
                yield body[i : i + 64 * 1024]

        r = await http.post(path, content=chunks(), headers=ACME)
        assert "content-length" not in r.request.headers
        assert (r.status_code, r.json()["error"]) == (413, "payload_too_large")
        assert await _acked(db_url, sid) == 0, "neither oversized ack was stored"

        # the answer comes before the body: a declared length, not one byte sent
        host = urlsplit(base).netloc
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer acme-token-1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {TEN_MB}\r\n\r\n"
        ).encode()
        got = await _raw_response(base, head, b"")
        assert got.startswith(b"HTTP/1.1 413"), got[:200]
        # ... and a chunked body that passed the limit but never ended
        head = head.replace(f"Content-Length: {TEN_MB}".encode(), b"Transfer-Encoding: chunked")
        chunk = b"%x\r\n%s\r\n" % (256 * 1024, _padded_ack(7, 256 * 1024))
        got = await _raw_response(base, head, chunk * 5)
        assert got.startswith(b"HTTP/1.1 413"), got[:200]
        assert await _acked(db_url, sid) == 0

        # at the limit it is read and stored
        r = await http.post(path, content=_padded_ack(8, 1 << 20), headers=ACME)
        assert r.json() == {"acked": 8}
        assert await _acked(db_url, sid) == 8


async def test_the_body_limit_is_configurable(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with (
        app,
        serve(db_url, max_body_bytes=64) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        await topic.publish(order_rows(3))
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)).json()[
            "id"
        ]
        r = await http.post(f"/subscriptions/{sid}/ack", content=_padded_ack(2, 65), headers=ACME)
        assert r.status_code == 413
        r = await http.post(f"/subscriptions/{sid}/ack", content=_padded_ack(2, 64), headers=ACME)
        assert r.json() == {"acked": 2}
        assert await _acked(db_url, sid) == 2
