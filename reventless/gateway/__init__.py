"""The HTTP/SSE gateway: subscriptions over JSON endpoints and Server-Sent Events.

An ASGI app (Starlette; extra ``serve``) that ``reventless serve`` runs with uvicorn.
See ``app.py`` for the endpoints and ``sse.py`` for the stream.

Example::

    app = create_app("sqlite:///shop.db", tokens={"s3cret": "acme", "admin-token": None})
    uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

try:
    from .app import GatewayOptions, create_app
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the gateway needs the 'serve' extra: pip install 'reventless[serve]' ({exc})"
    ) from exc

__all__ = ["GatewayOptions", "create_app"]
