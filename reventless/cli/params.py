"""Argument parsers of the ``reventless`` command: each names what it expected and what
it got, so the command prints ``Invalid value for '--limit': expected a count ...`` on one
line.

Example::

    limit: Annotated[int, typer.Option("--limit", parser=COUNT)] = 20
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import typer

#: The SQL dialects ``infra synth --dialect`` writes DDL for.
DIALECTS = ("sqlite", "postgresql")

#: ``--ssl-cert-reqs``: by name, or by number as uvicorn's option takes it.
CERT_REQS = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
    **{str(int(mode)): mode for mode in (ssl.CERT_NONE, ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED)},
}


def integer(least: int, what: str, most: int | None = None) -> Callable[[Any], int]:
    """A parser of integers ``>= least`` (and ``<= most`` when given)."""

    def parse(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            number: int | None = int(str(value))
        except ValueError:
            number = None
        if number is None or number < least or (most is not None and number > most):
            span = f">= {least}" if most is None else f"{least}-{most}"
            raise typer.BadParameter(f"expected {what} (an integer {span}), got {value!r}")
        return number

    return parse


def seconds(value: Any) -> float:
    """A number of seconds ``> 0``."""
    if isinstance(value, float):
        return value
    try:
        number: float | None = float(str(value))
    except ValueError:
        number = None
    if number is None or not 0 < number < float("inf"):
        raise typer.BadParameter(f"expected seconds (a number > 0), got {value!r}")
    return number


def cert_reqs(value: Any) -> ssl.VerifyMode:
    """``none``, ``optional`` or ``required`` (or 0, 1, 2)."""
    if isinstance(value, ssl.VerifyMode):
        return value
    try:
        return CERT_REQS[str(value).lower()]
    except KeyError:
        raise typer.BadParameter(
            f"expected none, optional or required (or 0, 1, 2), got {value!r}"
        ) from None


def dialects(value: Any) -> tuple[str, ...]:
    """A comma-separated list of ``DIALECTS``."""
    if isinstance(value, tuple):
        return value
    names = tuple(d.strip() for d in str(value).split(",") if d.strip())
    if not names or any(d not in DIALECTS for d in names):
        wanted = ", ".join(DIALECTS)
        raise typer.BadParameter(f"expected a comma-separated list of {wanted}, got {value!r}")
    return names


OFFSET = integer(1, "an offset")
COUNT = integer(1, "a count")
PORT = integer(0, "a port", most=65535)
