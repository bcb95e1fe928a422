"""URL helpers shared by the store and the broker adapters."""

from __future__ import annotations


def redact_url(url: str) -> str:
    """``url`` with the secret of its userinfo (a password or token) replaced by ``***``,
    for messages and logs."""
    head, sep, rest = url.partition("://")
    userinfo, at, tail = rest.partition("@")
    if not sep or not at or any(c in userinfo for c in "/?#"):
        return url
    shown = userinfo.partition(":")[0] + ":***" if ":" in userinfo else "***"
    return f"{head}://{shown}@{tail}"
