"""One error tree: every failure reventless raises on purpose is a ``ReventlessError``.

Example::

    try:
        await customers.execute("c-1", Register(name="Ada", address="1 Main St"))
    except rv.Rejected as r:
        print(r.code, r.detail)
"""

from __future__ import annotations

from typing import Any


class ReventlessError(Exception):
    """Base class of every error raised by reventless."""


class SpecError(ReventlessError):
    """A declaration is invalid (found when the class is defined or the log is built)."""


class ReservedNameError(SpecError):
    """A user field uses a reserved column name (any name starting with ``_``)."""


class SchemaMismatchError(ReventlessError):
    """Data (an Arrow batch, a stored schema) does not match the topic's schema."""


class UnknownEventTypeError(ReventlessError):
    """The log holds an event type that the spec does not declare."""


class TenantError(ReventlessError):
    """A publish or command targets a topic pinned to another tenant."""


class MetadataError(ReventlessError):
    """Caller-supplied event metadata is malformed."""


class StoreError(ReventlessError):
    """The event store cannot be opened or used."""


class StoreFullError(StoreError):
    """The store's disk (or its configured size limit) is full: the write was rolled back
    and nothing of it landed. Reads still work; writes succeed again once space is freed.

    Example::

        try:
            await orders.execute("o-1", Place(total=3))
        except rv.StoreFullError:
            ...  # alert, free space, send the command again (same command id)
    """


class CheckpointMovedError(ReventlessError):
    """A collector batch found its partition's stored checkpoint at ``stored``, past the
    one the batch started from: those events were processed already (an earlier commit
    that landed although its answer was lost, e.g. when the server went down at COMMIT).
    Nothing of this batch landed; the collector goes on from ``stored``."""

    def __init__(self, component: str, topic: str, partition: int, stored: int) -> None:
        self.component, self.topic, self.partition, self.stored = (
            component,
            topic,
            partition,
            stored,
        )
        super().__init__(
            f"collector {component!r}: the checkpoint of topic {topic!r} partition "
            f"{partition} is at {stored} already"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (CheckpointMovedError, (self.component, self.topic, self.partition, self.stored))


class StreamError(ReventlessError):
    """A streaming projection cannot start or go on (``reventless.spark.stream``): an
    unknown or unstreamable component, a bad trigger, a pipeline whose rows do not fit
    the read model's table."""


class StreamFencedError(StreamError):
    """A streaming projection's batch found the read model's checkpoints moved by someone
    else (a live collector still running it): nothing of the batch landed. Pause the live
    collector before the stream takes the read model over (``hand_to_stream``)."""


class KeyringError(ReventlessError):
    """Personal data cannot be sealed or opened: no master key, a malformed one, or a data
    key that does not open with it."""


class BrokerError(ReventlessError):
    """The broker cannot be reached or refused a publish."""


class PredicateError(ReventlessError):
    """A predicate is malformed, names an unknown column or compares the wrong types."""


class ConcurrencyError(ReventlessError):
    """Another writer appended to the same aggregate first; nothing from this append landed."""

    def __init__(self, topic: str, aggregate_id: str | None, expected_version: int | None) -> None:
        self.topic = topic
        self.aggregate_id = aggregate_id
        self.expected_version = expected_version
        super().__init__(
            f"concurrent append to {topic}/{aggregate_id}: "
            f"expected version {expected_version} is stale"
        )


class AppendConditionError(ConcurrencyError):
    """An append's condition failed: an event matching ``query`` exists at ``position``
    (after the condition's ``after``); nothing from this append landed.

    Example::

        try:
            await courses.append([StudentSubscribed(...)], condition=cond)
        except rv.AppendConditionError as e:
            print(e.position)  # read again from there and decide again
    """

    def __init__(self, topic: str, query: Any, after: int, position: int) -> None:
        self.topic = topic
        self.aggregate_id = None
        self.expected_version = None
        self.query = query
        self.after = after
        self.position = position
        ReventlessError.__init__(
            self,
            f"append condition failed on {topic}: an event matching the query exists at "
            f"position {position} (after {after})",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (AppendConditionError, (self.topic, self.query, self.after, self.position))


class CommandIdReusedError(ReventlessError):
    """A command id that already landed on one aggregate was sent for another; nothing ran."""

    def __init__(self, command_id: str, landed_on: str, sent_to: str) -> None:
        self.command_id = command_id
        self.landed_on = landed_on
        self.sent_to = sent_to
        super().__init__(
            f"command id {command_id!r} landed on {landed_on}, cannot run it for {sent_to}"
        )


class AggregateNotFoundError(ReventlessError):
    """No event exists for the requested aggregate."""

    def __init__(self, topic: str, aggregate_id: str) -> None:
        self.topic = topic
        self.aggregate_id = aggregate_id
        super().__init__(f"aggregate {topic}/{aggregate_id} has no events")


class UnhandledCommandError(SpecError):
    """The aggregate has no handler for the command type."""


class Rejected(ReventlessError):
    """A command handler's typed refusal: a machine-readable ``code`` and a human ``detail``.

    Example::

        raise rv.Rejected("already_registered", f"customer {self.id} exists")
    """

    def __init__(self, code: str, detail: str = "", **data: Any) -> None:
        self.code = code
        self.detail = detail
        self.data = data
        super().__init__(f"{code}: {detail}" if detail else code)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_rejected, (self.code, self.detail, self.data))


def _rebuild_rejected(code: str, detail: str, data: dict[str, Any]) -> Rejected:
    return Rejected(code, detail, **data)


# -- subscriptions (the gateway answers each with its ``status`` and ``code``) --------------


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


class UnauthorizedError(SubscriptionError):
    """A missing, unknown or expired credential (the gateway answers 401)."""

    status = 401
    code = "unauthorized"


class PayloadTooLargeError(BadRequestError):
    """A request body beyond the gateway's limit (HTTP 413); it was not read to the end."""

    status = 413
    code = "payload_too_large"


class UnsupportedMediaTypeError(BadRequestError):
    """A request body that is not JSON (HTTP 415)."""

    status = 415
    code = "unsupported_media_type"


class AckBeyondHeadError(SubscriptionError):
    """An ack names an offset the topic has not reached."""

    status = 409
    code = "ack_beyond_head"


class LeaseLostError(SubscriptionError):
    """The worker no longer holds the partition's lease (expired and taken over, released
    or never held): the work it fenced was refused and nothing of it landed.

    Raised by a leased collector's commit and by a subscription group's ack (the gateway
    answers HTTP 409 ``lease_lost``)."""

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
