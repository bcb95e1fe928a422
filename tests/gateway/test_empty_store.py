"""A gateway on a store no App has built yet answers, never with a 500."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.gateway.conftest import auth, serve


async def test_a_fresh_store_lists_no_topics_and_refuses_unknown_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    async with serve(url) as base, httpx.AsyncClient(base_url=base) as http:
        got = await http.get("/topics", headers=auth("operator-token"))
        assert (got.status_code, got.json()) == (200, [])
        made = await http.post(
            "/subscriptions", json={"topic": "Order"}, headers=auth("operator-token")
        )
        assert made.status_code == 404 and made.json()["error"] == "unknown_topic"
