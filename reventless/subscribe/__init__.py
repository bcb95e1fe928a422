"""Subscriptions: predicate filters, durable subscriptions, consumer groups with leases,
retention, and the pieces the HTTP/SSE gateway (``reventless.gateway``) serves.

Example::

    subs = Subscriptions(Database("sqlite:///shop.db"))
    await subs.open()
    sub = await subs.create("Order", where="type = 'OrderPlaced' AND total > 100")
    page = await subs.poll(sub.id, limit=100)
    await subs.ack(sub.id, page.next_offset - 1)
"""

from __future__ import annotations

from ..errors import (
    AckBeyondHeadError,
    BadRequestError,
    LeaseLostError,
    ResnapshotRequiredError,
    SubscriptionError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from ..predicate import COLUMN_ALIASES, BrokerFilter, Predicate, PredicateError
from ..store.subscriptions import Subscription
from .group import Leases, Member
from .retention import Behind, Retention
from .service import ADMIN, Page, Status, Subscriptions

__all__ = [
    "ADMIN",
    "COLUMN_ALIASES",
    "AckBeyondHeadError",
    "BadRequestError",
    "Behind",
    "BrokerFilter",
    "LeaseLostError",
    "Leases",
    "Member",
    "Page",
    "Predicate",
    "PredicateError",
    "ResnapshotRequiredError",
    "Retention",
    "Status",
    "Subscription",
    "SubscriptionError",
    "SubscriptionNotFoundError",
    "Subscriptions",
    "TopicNotFoundError",
]
