"""Store URLs for the scheduling tests: every live test runs on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.schedule import model

BACKENDS = ["sqlite-file", "sqlite-memory", pytest.param("postgres", marks=pytest.mark.postgres)]
SHARED = ["sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite-file":
        return f"sqlite:///{tmp_path / 'schedules.db'}"
    if kind == "sqlite-memory":
        return "sqlite://"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store of each kind."""
    return _url(request.param, request, tmp_path)


@pytest.fixture(params=SHARED)
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store that several Apps (or processes) can open at once."""
    return _url(request.param, request, tmp_path)


@pytest.fixture(autouse=True)
def _counters() -> Iterator[None]:
    model.DECIDED.clear()
    model.FLAKY_FAILURES["left"] = 0
    yield
