"""Fixtures of the network fault tests: a ``FaultProxy`` in front of each service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.faults.proxy import FaultProxy


@pytest.fixture
def pg_proxy(pg_url: str) -> Iterator[FaultProxy]:
    """A proxy in front of the PostgreSQL server of ``pg_url`` (``proxy.route(pg_url)``)."""
    parsed = sa.make_url(pg_url)
    with FaultProxy((parsed.host or "127.0.0.1", parsed.port or 5432)) as proxy:
        yield proxy
