"""The HTTP/SSE gateway: subscriptions over JSON endpoints and Server-Sent Events.

An ASGI app (Starlette; extra ``serve``) that ``reventless serve`` runs with uvicorn.
See ``app.py`` for the endpoints, ``sse.py`` for the stream, ``streamtoken.py`` for
browsers' stream tokens, ``bearertoken.py`` for bearer tokens and their hashes,
``parse.py`` for input limits, ``serve.py`` for shutdown and ``tls.py`` for HTTPS.

Example::

    app = create_app("sqlite:///shop.db", tokens={"s3cret-acme": "acme", "admin-token": None})
    await serve(app, host="127.0.0.1", port=8000)  # until SIGTERM/SIGINT
"""

from __future__ import annotations

try:
    from .app import Gateway, GatewayOptions, create_app
    from .bearertoken import BearerTokens, hash_token, new_token
    from .serve import GatewayServer, serve
    from .streamtoken import StreamTokens
    from .tls import TlsOptions
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the gateway needs the 'serve' extra: pip install 'reventless[serve]' ({exc})"
    ) from exc

__all__ = [
    "BearerTokens",
    "Gateway",
    "GatewayOptions",
    "GatewayServer",
    "StreamTokens",
    "TlsOptions",
    "create_app",
    "hash_token",
    "new_token",
    "serve",
]
