"""How a ``reventless`` command runs and fails: its coroutine on a fresh event loop, and
every user error as one line on stderr with exit status 2 (never a traceback).

Example::

    def topics(store: str = STORE) -> None:
        run(show_topics(store))          # typer.Exit(2) after "reventless: error: ..."
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn

import typer

from ..errors import ReventlessError

#: Exit statuses (the README lists them).
USER_ERROR = 2
INTERRUPTED = 130


class UsageError(ReventlessError):
    """A command-line argument the command cannot use (printed as one line, exit 2)."""


def one_line(text: str) -> str:
    """``text``'s lines joined with ``; `` (an error always prints as one line)."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or "error"


def fail(message: str, code: int = USER_ERROR) -> NoReturn:
    """Print ``reventless: error: message`` on stderr and exit with ``code``."""
    print(f"reventless: error: {one_line(message)}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def run(coro: Coroutine[Any, Any, int | None]) -> None:
    """Run a command's coroutine; raise ``typer.Exit`` with its status (0 for None)."""
    try:
        code = asyncio.run(coro) or 0
    except ReventlessError as exc:
        fail(str(exc))
    except BrokenPipeError:  # the reader went away (| head): not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except OSError as exc:  # a file or a connection the user named
        where = f": {exc.filename}" if exc.filename else ""
        fail(f"{exc.strerror or exc}{where}")
    except KeyboardInterrupt:
        code = INTERRUPTED
    raise typer.Exit(code)
