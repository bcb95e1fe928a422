"""Errors of subscriptions (all ``ReventlessError``; the gateway maps them to HTTP statuses)."""

from __future__ import annotations

from .. import errors as _core
from ..errors import ReventlessError


class SubscriptionError(ReventlessError):
    """A subscription operation was refused; nothing changed."""

    status = 400
    code = "bad_request"


class SubscriptionNotFoundError(SubscriptionError):
    """No open subscription with this id (for this tenant)."""

    status = 404
    code = "not_found"


class TopicNotFoundError(SubscriptionError):
    """The store has no such topic (or it is pinned to another tenant)."""

    status = 404
    code = "unknown_topic"


class BadRequestError(SubscriptionError):
    """A malformed argument: a negative or oversized limit, an unknown column..."""


class AckBeyondHeadError(SubscriptionError):
    """An ack names an offset the topic has not reached."""

    status = 409
    code = "ack_beyond_head"


class LeaseLostError(SubscriptionError, _core.LeaseLostError):
    """The worker does not hold the partition's lease (expired, taken over or never held)."""

    status = 409
    code = "lease_lost"


class ResnapshotRequiredError(SubscriptionError):
    """The cursor is behind the retained horizon: events it needs were deleted.

    ``horizon`` is the last deleted offset; rebuild state from a snapshot, then resume at
    ``horizon + 1`` (``Subscriptions.seek``)."""

    status = 410
    code = "resnapshot_required"

    def __init__(self, topic: str, cursor: int, horizon: int, partition: int | None = None) -> None:
        self.topic, self.cursor, self.horizon, self.partition = topic, cursor, horizon, partition
        where = f"topic {topic!r}" + ("" if partition is None else f" partition {partition}")
        super().__init__(
            f"resnapshot required: {where} retains offsets after {horizon}, the cursor needs "
            f"{cursor}"
        )
