"""The HTTP/SSE gateway: subscriptions over JSON endpoints and Server-Sent Events.

An ASGI app (Starlette; extra ``serve``) that ``reventless serve`` runs with uvicorn.
See ``app.py`` for the endpoints, ``sse.py`` for the stream, ``streamtoken.py`` for
browsers' stream tokens, ``parse.py`` for input limits and ``serve.py`` for shutdown.

Example::

    app = create_app("sqlite:///shop.db", tokens={"s3cret-acme": "acme", "admin-token": None})
    await serve(app, host="127.0.0.1", port=8000)  # until SIGTERM/SIGINT
"""

from __future__ import annotations

try:
    from .app import Gateway, GatewayOptions, create_app
    from .serve import GatewayServer, serve
    from .streamtoken import StreamTokens
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the gateway needs the 'serve' extra: pip install 'reventless[serve]' ({exc})"
    ) from exc

__all__ = ["Gateway", "GatewayOptions", "GatewayServer", "StreamTokens", "create_app", "serve"]
