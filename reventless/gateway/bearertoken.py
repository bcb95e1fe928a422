"""Bearer tokens: the gateway's tokens, each given as itself or as a hash of it.

A tokens mapping (``reventless serve --tokens-file``) maps each bearer token to its tenant
(``None``: every tenant). An entry may hold ``sha256$<64 hex digits>`` instead of the
token: the SHA-256 of the token's bytes, so a copy of the file (a backup, a config
repository, a support bundle) lets no one in. ``hash_token`` (``reventless token hash``)
writes such a line.

Why one fast SHA-256 and no salted, slow hash (scrypt, argon2): those protect secrets
people choose, which a thief can guess offline. A bearer token is a random secret
(``new_token``: 256 bits), which no one can recover from its SHA-256, salted or not; and a
slow hash would be paid on every request, for every entry. Here a request costs one
SHA-256 of the token it sent and a constant-time comparison with every entry's digest
(plain tokens are digested once, at startup), so no timing tells which entry, if any,
matched or where two tokens differ. ``hash_token`` refuses tokens shorter than 16
characters: a fast hash does not protect a short one.

A plain token holds no ``$`` (RFC 6750's token characters have none): an entry with one is
a hash and must be well formed, so a mistyped or foreign hash (bcrypt, scrypt) fails at
startup instead of becoming a token equal to the hash text. Errors name an entry by its
tenant, never by its token or hash.

Example::

    line = hash_token("Lp1l4d0D7tJ3c0m1vM9xZyQk")   # "sha256$..."
    tokens = BearerTokens({line: "acme", "operator-token": None})
    assert tokens.tenant_of("Lp1l4d0D7tJ3c0m1vM9xZyQk") == (True, "acme")
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

from ..errors import ReventlessError

#: The scheme of a hashed entry, before its ``$``.
SCHEME = "sha256"
#: The fewest characters of a plain token in a tokens mapping.
MIN_TOKEN_LENGTH = 8
#: The fewest characters of a token ``hash_token`` hashes.
MIN_HASHED_LENGTH = 16
_HASHED = re.compile(r"sha256\$([0-9a-fA-F]{64})")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


def new_token() -> str:
    """A new random bearer token: 256 bits, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The tokens-file line that stands for ``token``: ``sha256$<64 hex digits>``
    (``ReventlessError`` for a token shorter than 16 characters or with characters other
    than visible ASCII, which an ``Authorization`` header cannot carry as sent)."""
    if not _VISIBLE_ASCII.fullmatch(token):
        raise ReventlessError(
            "a token is visible ASCII characters (no spaces, no control characters)"
        )
    if len(token) < MIN_HASHED_LENGTH:
        raise ReventlessError(
            f"a token to hash has at least {MIN_HASHED_LENGTH} characters (got {len(token)}): "
            "a fast hash protects random tokens, not short ones"
        )
    return f"{SCHEME}${hashlib.sha256(token.encode()).hexdigest()}"


def _entry(tenant: object) -> str:
    return (
        "an operator entry (tenant null)" if tenant is None else f"the entry of tenant {tenant!r}"
    )


class BearerTokens:
    """Checks bearer tokens against a tokens mapping of plain tokens and hashes (see the
    module docstring); ``ReventlessError`` at construction for a malformed mapping.
    ``plain``: how many entries hold the token itself (none: nothing in the mapping is a
    secret to derive a stream-token key from)."""

    def __init__(self, tokens: Mapping[str, str | None]) -> None:
        if not isinstance(tokens, Mapping) or not tokens:
            raise ReventlessError("the gateway needs at least one bearer token")
        digests: dict[bytes, str | None] = {}
        self.plain = 0  # how many entries hold the token itself
        for key, tenant in tokens.items():
            if tenant is not None and not isinstance(tenant, str):
                raise ReventlessError(f"a tenant is a string or null, got {type(tenant).__name__}")
            digest = self._digest(key, tenant)
            if digest in digests:  # keys are unique: the token is there plain and hashed
                raise ReventlessError(
                    f"{_entry(tenant)} repeats another entry's token (once plain, once hashed)"
                )
            digests[digest] = tenant
        self._entries = list(digests.items())

    def _digest(self, key: object, tenant: str | None) -> bytes:
        if not isinstance(key, str):
            raise ReventlessError(f"{_entry(tenant)}: a token is a string")
        if "$" in key:
            hashed = _HASHED.fullmatch(key)
            if hashed is None:
                raise ReventlessError(
                    f"{_entry(tenant)} is not a well-formed token hash: expected "
                    f"{SCHEME}$ and 64 hex digits (reventless token hash); "
                    "a plain token has no '$'"
                )
            return bytes.fromhex(hashed.group(1))
        if len(key) < MIN_TOKEN_LENGTH:
            raise ReventlessError(
                f"{_entry(tenant)}: a bearer token has at least {MIN_TOKEN_LENGTH} characters"
            )
        self.plain += 1
        return hashlib.sha256(key.encode()).digest()

    def tenant_of(self, given: str) -> tuple[bool, str | None]:
        """Whether ``given`` is one of the tokens, and its tenant (``None``: every tenant)."""
        digest = hashlib.sha256(given.encode()).digest()
        found: tuple[bool, str | None] = (False, None)
        for known, tenant in self._entries:  # compare with every entry: no timing hint
            if hmac.compare_digest(known, digest):
                found = (True, tenant)
        return found
