"""``reventless serve`` as a process: it serves the gateway on the given port."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import httpx

import reventless as rv
from tests.subscribe.conftest import order_rows, orders_app


async def test_reventless_serve_runs_the_gateway(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    async with app:
        await topic.publish(order_rows(3), meta=rv.Metadata(tenant="acme"))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"acme-secret-1": "acme"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reventless.cli",
        "serve",
        "--store",
        url,
        "--tokens-file",
        str(tokens),
        "--port",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(100):
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            headers = {"Authorization": "Bearer acme-secret-1"}
            r = await http.post("/subscriptions", json={"topic": "orders"}, headers=headers)
            assert r.status_code == 201, r.text
            page = (
                await http.get(f"/subscriptions/{r.json()['id']}/events", headers=headers)
            ).json()
            assert [e["data"]["qty"] for e in page["events"]] == [0, 1, 2]
    finally:
        proc.terminate()
        await proc.wait()
