"""The store conformance suite on PostgreSQL (one schema per test in a per-run database)."""

from __future__ import annotations

import pytest

from reventless.testing.store_suite import StoreConformance

pytestmark = pytest.mark.postgres


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    def store_url(self, pg_url: str) -> str:
        return pg_url
