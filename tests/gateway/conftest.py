"""A real gateway: ``GatewayServer`` (uvicorn) serving ``create_app`` on a loopback port."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from reventless.gateway import GatewayOptions, GatewayServer, TlsOptions, create_app
from tests.subscribe.conftest import db_url  # noqa: F401  (fixture)

TOKENS: Mapping[str, str | None] = {
    "acme-token-1": "acme",
    "globex-token-1": "globex",
    "operator-token": None,
}


@asynccontextmanager
async def serve(
    url: str,
    *,
    port: int = 0,
    tokens: Mapping[str, str | None] = TOKENS,
    tls: TlsOptions | None = None,
    **options: Any,
) -> AsyncIterator[str]:
    """Run the gateway for ``url`` until the block ends (on ``port``, 0: a free one; HTTPS
    with ``tls``); yields its base URL. Open streams end with a ``closed`` frame when it
    stops."""
    opts = GatewayOptions(**{"poll_interval": 0.05, **options})
    app = create_app(url, tokens=tokens, options=opts)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
        **(tls.uvicorn_config() if tls is not None else {}),
    )
    server = GatewayServer(app, config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"{'https' if tls is not None else 'http'}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def auth(token: str) -> dict[str, str]:
    """The Authorization header of ``token``."""
    return {"Authorization": f"Bearer {token}"}
