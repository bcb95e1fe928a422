"""Stream tokens: short-lived credentials that open one subscription's SSE stream.

A browser's ``EventSource`` cannot send an ``Authorization`` header, and a bearer token in
a URL would leak into logs and history. So a page's backend (or the page, with its bearer
token) asks ``POST /subscriptions/{id}/stream-tokens`` for a token that is good for
``GET /subscriptions/{id}/stream?access_token=...`` only: that one subscription, in the
minting token's tenant, until it expires. Tokens are HMAC-SHA256 signed, not stored; the
key is derived from the gateway's bearer tokens, so every gateway serving the same tokens
file (a restart, a replica) accepts them, and changing that file revokes them all.

Example::

    tokens = StreamTokens.derived({"s3cret-acme": "acme"}, ttl=300)
    token, expires_at = tokens.mint("sub-1", "acme")
    assert tokens.check(token, "sub-1") == "acme"
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping

from ..errors import ReventlessError, UnauthorizedError

#: Longer ``access_token`` values are refused before any decoding.
MAX_TOKEN_LENGTH = 1024
_PREFIX = "v1."


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StreamTokens:
    """Mints and checks stream tokens (see the module docstring)."""

    def __init__(self, key: bytes, *, ttl: float) -> None:
        if len(key) < 16:
            raise ReventlessError("a stream token key has at least 16 bytes")
        self._key, self.ttl = key, ttl

    @classmethod
    def derived(cls, bearer: Mapping[str, str | None], *, ttl: float) -> StreamTokens:
        """Tokens keyed by a hash of the bearer tokens and their tenants."""
        material = json.dumps(sorted(bearer.items()), separators=(",", ":")).encode()
        return cls(hashlib.sha256(b"reventless stream tokens\0" + material).digest(), ttl=ttl)

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def mint(self, sub_id: str, tenant: str | None, *, now: float | None = None) -> tuple[str, int]:
        """A token for ``sub_id``'s stream in ``tenant``'s scope, and when it expires
        (Unix seconds)."""
        expires = int((time.time() if now is None else now) + self.ttl)
        payload = json.dumps({"s": sub_id, "t": tenant, "e": expires}, separators=(",", ":"))
        body = _PREFIX + _b64(payload.encode())
        return f"{body}.{self._sign(body)}", expires

    def check(self, token: str, sub_id: str, *, now: float | None = None) -> str | None:
        """The tenant ``token`` grants on ``sub_id``'s stream (``UnauthorizedError`` if it is
        malformed, forged, expired or for another subscription)."""
        body, _, sig = token.rpartition(".")
        if len(token) > MAX_TOKEN_LENGTH or not body.startswith(_PREFIX) or not sig:
            raise UnauthorizedError("a malformed stream token")
        if not hmac.compare_digest(self._sign(body), sig):
            raise UnauthorizedError("an invalid stream token")
        try:
            claims = json.loads(_unb64(body[len(_PREFIX) :]))
        except (ValueError, binascii.Error):  # pragma: no cover - signed by us
            raise UnauthorizedError("a malformed stream token") from None
        if claims.get("s") != sub_id:
            raise UnauthorizedError("the stream token is for another subscription")
        if claims.get("e", 0) < (time.time() if now is None else now):
            raise UnauthorizedError("the stream token expired: mint a new one")
        tenant = claims.get("t")
        return tenant if isinstance(tenant, str) else None
