"""``reventless serve`` as a process: it serves the gateway on the given port and stops
within seconds on SIGTERM/SIGINT, also with SSE clients connected."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

import reventless as rv
from examples.search_index.sse import SseEvent, read_events
from tests.services import free_port
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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_stops_serve_with_streams_open(tmp_path: Path, sig: signal.Signals) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    async with app:
        await topic.publish(order_rows(3), meta=rv.Metadata(tenant="acme"))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"acme-secret-1": "acme"}))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "reventless.cli", "serve", "--store", url,
        "--tokens-file", str(tokens), "--port", str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    headers = {"Authorization": "Bearer acme-secret-1"}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            await _healthy(http)
            sid = (
                await http.post("/subscriptions", json={"topic": "orders"}, headers=headers)
            ).json()["id"]

            async def client() -> list[SseEvent]:
                got: list[SseEvent] = []
                async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=headers) as r:
                    async for e in read_events(r):
                        got.append(e)
                        if len(got) == 3:
                            opened.release()
                return got

            opened = asyncio.Semaphore(0)
            clients = [asyncio.create_task(client()) for _ in range(2)]
            for _ in clients:
                await asyncio.wait_for(opened.acquire(), 10)  # both streams hold 3 events
            t0 = time.monotonic()
            proc.send_signal(sig)
            code = await asyncio.wait_for(proc.wait(), 10)
            took = time.monotonic() - t0
            streams = await asyncio.wait_for(asyncio.gather(*clients), 5)
        assert code == 0, (await proc.stderr.read()).decode()[-2000:]  # type: ignore[union-attr]
        assert took < 5, f"stopped after {took:.1f}s"
        for frames in streams:
            assert [e.event for e in frames] == ["event"] * 3 + ["closed"]
            assert frames[-1].json() == {"id": sid, "reason": "shutdown"}
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _healthy(http: httpx.AsyncClient) -> None:
    for _ in range(200):
        try:
            if (await http.get("/health")).status_code == 200:
                return
        except httpx.TransportError:
            await asyncio.sleep(0.05)
    raise AssertionError("reventless serve did not start")
