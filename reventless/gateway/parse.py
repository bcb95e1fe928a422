"""Request input, bounded and typed: every malformed value becomes a ``BadRequestError``
(or a subclass: 413 for an oversized body, 415 for a body that is not JSON) before it
reaches the store.

Bodies are read in chunks and refused as soon as they pass the limit (a declared
``Content-Length`` beyond it is refused before any byte is read), so a client cannot make
the gateway buffer more than ``max_bytes``. Integers are ASCII digits within the store's
64-bit range; JSON bodies are objects of valid Unicode, nested no deeper than Python's
parser allows.

Example::

    data = await json_body(request, max_bytes=1 << 20)
    offset = json_int(data, "offset", low=0)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from ..errors import BadRequestError, PayloadTooLargeError, UnsupportedMediaTypeError

#: The largest offset, epoch or partition the store holds (a signed 64-bit BIGINT).
MAX_INT = 2**63 - 1
_INT = re.compile(r"-?[0-9]{1,19}")
_JSON_TYPES = ("application/json",)


def check_length(request: Request, max_bytes: int) -> None:
    """Refuse a declared ``Content-Length`` beyond ``max_bytes`` (nothing is read)."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"the body is limited to {max_bytes} bytes")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The body, read chunk by chunk and refused once it passes ``max_bytes`` (chunked
    transfers declare no length up front)."""
    check_length(request, max_bytes)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLargeError(f"the body is limited to {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request, *, max_bytes: int, optional: bool = False) -> dict[str, Any]:
    """The body as a JSON object. ``optional``: an empty body is ``{}``."""
    ctype = request.headers.get("content-type")
    if ctype is not None:
        media = ctype.partition(";")[0].strip().lower()
        if media not in _JSON_TYPES and not media.endswith("+json"):
            raise UnsupportedMediaTypeError(
                f"the body must be application/json, got content type {media!r}"
            )
    raw = await read_body(request, max_bytes)
    if not raw.strip() and optional:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("the body is not valid UTF-8") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BadRequestError("the JSON body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and ints past Python's digit limit
        raise BadRequestError(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequestError("the body must be a JSON object")
    if b"\\u" in raw:
        _check_unicode(data)
    return data


def _no_constant(name: str) -> Any:
    raise BadRequestError(f"the body holds {name}, which is not JSON")


def _check_unicode(data: Any) -> None:
    # "\ud800" and "\u0000" escapes decode to text no database accepts (PostgreSQL
    # refuses NUL in text; neither stores lone surrogates)
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            check_text(v, "the body")
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def check_text(value: str, name: str) -> None:
    """Refuse text a database cannot store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise BadRequestError(f"{name} holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError(f"{name} holds a lone surrogate (\\ud800-\\udfff)") from None


def check_url(request: Request) -> None:
    """Refuse path and query parameters that hold text a database cannot store."""
    for key, value in request.path_params.items():
        check_text(value, key)
    for key, value in request.query_params.multi_items():
        check_text(value, key)


def check_fields(data: Mapping[str, Any], allowed: set[str]) -> None:
    """Refuse fields the endpoint does not know (a typo must not pass silently)."""
    unknown = set(data) - allowed
    if unknown:
        raise BadRequestError(f"unknown fields {sorted(unknown)} (known: {sorted(allowed)})")


def to_int(raw: str, name: str, *, low: int, high: int = MAX_INT) -> int:
    """``raw`` as an integer in ``low..high`` (ASCII digits only)."""
    if not _INT.fullmatch(raw.strip()) or not low <= int(raw) <= high:
        raise BadRequestError(f"{name} must be an integer {low}..{high}, got {raw[:40]!r}")
    return int(raw)


def query_int(
    request: Request, name: str, default: int | None, *, low: int, high: int = MAX_INT
) -> int | None:
    """Query parameter ``name`` as an integer in ``low..high`` (``default`` if absent)."""
    raw = request.query_params.get(name)
    return default if raw is None else to_int(raw, name, low=low, high=high)


def query_list(request: Request, name: str) -> list[str] | None:
    """Query parameter ``name`` as a comma-separated list (None if absent)."""
    raw = request.query_params.get(name)
    return None if raw is None else [x.strip() for x in raw.split(",") if x.strip()]


def json_int(data: Mapping[str, Any], name: str, *, low: int, high: int = MAX_INT) -> int:
    """Field ``name`` of a JSON body: an integer (not a bool) in ``low..high``."""
    v = data.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise BadRequestError(f"{name} must be an integer {low}..{high}, got {str(v)[:40]}")
    return v


def last_event_id(request: Request) -> int | None:
    """The ``Last-Event-ID`` header as an offset (None if absent)."""
    raw = request.headers.get("last-event-id")
    return None if raw is None else to_int(raw, "Last-Event-ID", low=0, high=MAX_INT - 1)
