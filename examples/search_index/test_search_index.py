"""The search-index example against a real gateway (uvicorn on loopback) and store."""

from __future__ import annotations

from pathlib import Path

import httpx
import pyarrow as pa

import reventless as rv
from examples.search_index import PRODUCTS, SearchIndex, follow
from tests.gateway.conftest import auth, serve


def _rows(items: list[tuple[str, str, bool]]) -> pa.Table:
    return pa.table(
        {
            "sku": [i[0] for i in items],
            "title": [i[1] for i in items],
            "listed": [i[2] for i in items],
        },
        schema=PRODUCTS,
    )


async def test_indexer_follows_the_topic_and_resumes_after_a_drop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    app = rv.App(store=url)
    products = app.topic("products", schema=PRODUCTS, key="sku", partitions=4)
    async with (
        app,
        serve(url) as base,
        httpx.AsyncClient(base_url=base, headers=auth("operator-token"), timeout=10) as http,
    ):
        items = [(f"sku-{i}", f"{'red' if i % 2 else 'blue'} chair {i}", True) for i in range(120)]
        await products.publish(_rows(items))
        r = await http.post(
            "/subscriptions",
            json={"topic": "products", "columns": ["sku", "title", "listed"]},
        )
        sub_id = r.json()["id"]
        index = SearchIndex()
        reconnects = await follow(http, sub_id, index, until_offset=120, drop_after=45)
        assert reconnects == 2
        assert index.search("red") == {f"sku-{i}" for i in range(120) if i % 2}
        # later changes: relisted titles and delistings; a fresh indexer state would need a
        # snapshot, this one resumes from its ack
        await products.publish(_rows([("sku-1", "green chair", True), ("sku-2", "", False)]))
        await follow(http, sub_id, index, until_offset=122)
        assert "sku-1" in index.search("green") and "sku-1" not in index.search("red")
        assert "sku-2" not in index.search("blue")
        status = (await http.get(f"/subscriptions/{sub_id}")).json()
        assert (status["acked"], status["lag"]) == (122, 0)
