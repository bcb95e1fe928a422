"""The store conformance suite on SQLite (file and memory)."""

from __future__ import annotations

from reventless.testing.store_suite import StoreConformance


class TestSqliteStores(StoreConformance):
    """``store_url`` comes from tests/conftest.py: a SQLite file and SQLite in memory."""
