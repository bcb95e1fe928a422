"""Serving the gateway with uvicorn, and stopping it cleanly.

uvicorn alone waits for every response to finish before it stops, and an SSE stream never
finishes: one connected client keeps the server up forever. ``GatewayServer`` first
closes the gateway's streams (each ends with a ``closed`` frame, reason ``shutdown``, so
clients reconnect elsewhere or later), then lets uvicorn finish the other requests; what
is still running after ``grace`` seconds is cancelled. SIGTERM and SIGINT stop it, and the
process exits normally (``reventless serve`` returns 0) instead of re-raising the signal.
``tls`` serves HTTPS (``tls.py``), its files checked before uvicorn starts.

Example::

    app = create_app("sqlite:///shop.db", tokens={"s3cret-acme": "acme"})
    await serve(app, host="127.0.0.1", port=8000)
    await serve(app, port=8443, tls=TlsOptions(certfile="server.pem", keyfile="server.key"))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import socket
from collections.abc import Generator

import uvicorn

from .app import Gateway
from .tls import TlsOptions

_TOKEN = re.compile(r"access_token=[^&\s\"]*")


class RedactStreamTokens(logging.Filter):
    """Keeps stream tokens (``?access_token=``) out of uvicorn's access log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN.sub("access_token=<redacted>", a) if isinstance(a, str) else a
                for a in record.args
            )
        return True


class GatewayServer(uvicorn.Server):
    """A uvicorn server that closes the gateway's streams when it stops (and redacts
    stream tokens from its access log)."""

    def __init__(self, app: Gateway, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.gateway = app
        access = logging.getLogger("uvicorn.access")
        if not any(isinstance(f, RedactStreamTokens) for f in access.filters):
            access.addFilter(RedactStreamTokens())

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """SIGTERM/SIGINT stop the server (a second SIGINT forces it); the previous handlers
        come back afterwards and the signal is not raised again."""
        loop = asyncio.get_running_loop()
        signals = (signal.SIGINT, signal.SIGTERM)
        try:
            before = {sig: signal.getsignal(sig) for sig in signals}
            for sig in signals:
                loop.add_signal_handler(sig, self.handle_exit, sig, None)
        except (NotImplementedError, RuntimeError, ValueError):  # no signals in this thread
            yield
            return
        try:
            yield
        finally:
            for sig, handler in before.items():
                loop.remove_signal_handler(sig)
                if handler is not None:  # None: set outside Python, left as it is
                    signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Close the streams first, so the connections they hold can finish."""
        self.gateway.close_streams()
        await super().shutdown(sockets)


async def serve(
    app: Gateway,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    grace: int = 5,
    log_level: str = "info",
    tls: TlsOptions | None = None,
) -> None:
    """Serve ``app`` on ``host:port`` (HTTPS with ``tls``) until SIGTERM or SIGINT; returns
    once it stopped. A TLS file that cannot be used raises ``ReventlessError`` first."""
    if tls is not None:
        tls.context()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=grace,
        **(tls.uvicorn_config() if tls is not None else {}),
    )
    await GatewayServer(app, config).serve()
