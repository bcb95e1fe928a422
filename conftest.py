"""Shared fixtures: every store-backed test body runs against each store URL."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

STORE_KINDS = ["sqlite-file", "sqlite-memory"]


def make_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite-file":
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "sqlite-memory":
        return "sqlite://"
    raise ValueError(kind)


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL of each kind (file stores use a per-test temp dir)."""
    yield make_url(request.param, tmp_path)


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    """A fresh SQLite file store URL."""
    return f"sqlite:///{tmp_path / 'store.db'}"
