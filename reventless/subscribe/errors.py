"""Errors of subscriptions, defined in ``reventless.errors`` (the one error tree) and
re-exported here; the gateway maps them to HTTP statuses (``status``, ``code``)."""

from __future__ import annotations

from ..errors import (
    AckBeyondHeadError,
    BadRequestError,
    LeaseLostError,
    PredicateError,
    ResnapshotRequiredError,
    SubscriptionError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)

__all__ = [
    "AckBeyondHeadError",
    "BadRequestError",
    "LeaseLostError",
    "PredicateError",
    "ResnapshotRequiredError",
    "SubscriptionError",
    "SubscriptionNotFoundError",
    "TopicNotFoundError",
]
