"""What a test does when a service it needs is missing."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(what: str) -> NoReturn:
    """Under CI (``CI`` set) fail the test; a developer's run skips it with the reason."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI=true: service-backed tests must not skip)")
    pytest.skip(what)
