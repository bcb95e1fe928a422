"""Store URLs for the scheduling tests: every live test runs on SQLite and PostgreSQL
(``url``; ``shared_url``, from the root conftest, where several Apps open one store)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.schedule import model


@pytest.fixture
def url(any_url: str) -> str:
    """A fresh store of each kind (the root conftest's ``any_url``)."""
    return any_url


@pytest.fixture(autouse=True)
def _counters() -> Iterator[None]:
    model.DECIDED.clear()
    model.FLAKY_FAILURES["left"] = 0
    yield
