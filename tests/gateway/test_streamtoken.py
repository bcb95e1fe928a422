"""Stream tokens: scoped to one subscription and one tenant, short-lived, signed with a
key derived from the bearer tokens (so a restart or a replica accepts them)."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest
import uvicorn

import reventless as rv
from examples.search_index.sse import read_events
from reventless.errors import UnauthorizedError
from reventless.gateway import GatewayServer, StreamTokens, create_app
from tests.gateway.conftest import TOKENS, auth, serve
from tests.subscribe.conftest import order_rows, orders_app

ACME, GLOBEX = auth("acme-token-1"), auth("globex-token-1")


def test_a_token_opens_one_subscription_in_one_tenant_until_it_expires() -> None:
    tokens = StreamTokens.derived(TOKENS, ttl=60)
    token, expires = tokens.mint("sub-1", "acme", now=1_000)
    assert expires == 1_060
    assert tokens.check(token, "sub-1", now=1_059) == "acme"
    admin, _ = tokens.mint("sub-1", None, now=1_000)
    assert tokens.check(admin, "sub-1", now=1_000) is None
    refused = [
        (token, "sub-2", 1_000),  # another subscription
        (token, "sub-1", 1_061),  # expired
        (token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), "sub-1", 1_000),  # forged
        (token.replace("v1.", "v2.", 1), "sub-1", 1_000),
        ("acme-token-1", "sub-1", 1_000),  # a bearer token is no stream token
        ("", "sub-1", 1_000),
        ("v1." + "A" * 2000 + ".x", "sub-1", 1_000),
    ]
    for bad, sub, now in refused:
        with pytest.raises(UnauthorizedError):
            tokens.check(bad, sub, now=now)
    # the same bearer tokens derive the same key; another tokens file revokes every token
    assert StreamTokens.derived(dict(TOKENS), ttl=60).check(token, "sub-1", now=1_000) == "acme"
    other = StreamTokens.derived({**TOKENS, "new-token-1": "acme"}, ttl=60)
    with pytest.raises(UnauthorizedError):
        other.check(token, "sub-1", now=1_000)


async def test_a_stream_token_over_http(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, serve(db_url) as base, httpx.AsyncClient(base_url=base, timeout=10) as http:
        await topic.publish(order_rows(2), meta=rv.Metadata(tenant="acme"))
        await topic.publish(order_rows(2, start=2), meta=rv.Metadata(tenant="globex"))
        sid = (await http.post("/subscriptions", json={"topic": "orders"}, headers=ACME)).json()[
            "id"
        ]
        r = await http.post(f"/subscriptions/{sid}/stream-tokens", headers=ACME)
        assert r.status_code == 201 and r.json()["expires_at"] > 0
        token = r.json()["token"]
        assert (
            await http.post(f"/subscriptions/{sid}/stream-tokens", headers=GLOBEX)
        ).status_code == 404
        stream = f"/subscriptions/{sid}/stream?access_token={token}"
        async with http.stream("GET", stream) as r:  # no Authorization header
            assert r.status_code == 200
            events = read_events(r)
            got = [await asyncio.wait_for(anext(events), 10) for _ in range(2)]
        assert [e.json()["data"]["qty"] for e in got] == [0, 1], "acme's events only"
        # only the stream route takes it; a closed subscription's token opens nothing
        r = await http.get(f"/subscriptions/{sid}/events?access_token={token}")
        assert r.status_code == 401
        await http.delete(f"/subscriptions/{sid}", headers=ACME)
        r = await http.get(stream)
        assert (r.status_code, r.json()["error"]) == (404, "not_found")


def test_stream_tokens_stay_out_of_the_access_log() -> None:
    app = create_app("sqlite://", tokens=TOKENS)
    GatewayServer(app, uvicorn.Config(app))
    access = logging.getLogger("uvicorn.access")
    path = "/subscriptions/s/stream?access_token=v1.abc.def&from=3"
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", path, "1.1", 200), None,
    )  # fmt: skip
    assert access.filter(record)
    assert "v1.abc" not in record.getMessage()
    assert "access_token=<redacted>&from=3" in record.getMessage()
