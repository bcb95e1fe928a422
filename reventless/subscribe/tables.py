"""The subscription tables, defined in ``reventless.store.subscription_tables`` (re-exported
here for code that imported them from this module)."""

from __future__ import annotations

from ..store.subscription_tables import (
    horizons,
    metadata,
    partitions,
    retention,
    subscriptions,
    workers,
)

__all__ = ["horizons", "metadata", "partitions", "retention", "subscriptions", "workers"]
