"""``SnsSqsOptions``: the settings of an ``sns+sqs://`` broker URL, and the name mapping.

This module does not import aiobotocore: the CloudFormation synthesis uses the same
names as the running adapter.

Example::

    SnsSqsOptions.from_url("sns+sqs://us-east-1?endpoint=http://127.0.0.1:5000&prefix=shop")
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from urllib.parse import parse_qsl, unquote, urlsplit

from reventless.errors import BrokerError
from reventless.urls import redact_url

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]*$")
_DEDUP_SAFE = re.compile(r"^[A-Za-z0-9!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]{1,128}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: SNS and SQS take at most 256 KiB per message (body + attributes) and per batch call.
MAX_REQUEST_BYTES = 256 * 1024
#: Bytes kept free for the message attributes and the request's JSON framing.
ATTRIBUTE_ALLOWANCE = 4096
#: The largest payload (``Message.data``) that fits one message once base64-encoded.
MAX_PAYLOAD_BYTES = (MAX_REQUEST_BYTES - ATTRIBUTE_ALLOWANCE) * 3 // 4


def token(name: str) -> str:
    """``name`` as part of an SNS topic / SQS queue name: ``[A-Za-z0-9_-]`` only.

    A name that had to change gets a crc32 suffix, so ``a.b`` and ``a_b`` stay apart.
    """
    clean = _UNSAFE.sub("_", name)
    if clean == name and name:
        return name
    return f"{clean}_{zlib.crc32(name.encode()):08x}"


def _bool(raw: str) -> bool:
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(raw)


_CONVERT: dict[str, Callable[[str], object]] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": _bool,
}


@dataclass(frozen=True, slots=True)
class SnsSqsOptions:
    """Every knob of the adapter; each one (except ``region`` and the credentials) is a
    URL query option. Queue settings apply when the adapter creates a queue."""

    #: AWS region (the URL's host part).
    region: str = "us-east-1"
    #: Endpoint URL for both services (moto, LocalStack); empty: the AWS endpoints.
    endpoint: str = ""
    #: Prepended to every topic and queue name (``<prefix>-...``): one per app/environment.
    prefix: str = ""
    #: FIFO topics and queues (per-aggregate order). ``false``: standard topics and queues,
    #: allowed only for collectors declared with ``ordered=False``.
    fifo: bool = True
    #: Create topics, queues and subscriptions on demand. ``false``: they must exist
    #: (deployed from the CloudFormation template); the adapter only looks them up.
    create: bool = True
    #: Receives of a message before it goes to the group's dead-letter queue.
    max_receive: int = 5
    #: Seconds a received message stays invisible (extended while a handler runs).
    visibility: int = 30
    #: Long-poll seconds of ReceiveMessage (0..20); closing a subscription waits for a
    #: receive in flight, so at most this long.
    wait: int = 10
    #: Messages per ReceiveMessage (1..10).
    batch: int = 10
    #: Seconds a call may go unanswered beyond its long poll (``wait``) before the SDK
    #: gives up on the connection and retries (3 attempts); connecting takes at most
    #: this long too (5 s at most). Bounds how long a silent network or a half-open
    #: connection stalls publishes and receives.
    timeout: float = 15.0
    #: Seconds before a failed message is received again (doubles per receive).
    backoff: int = 1
    #: Upper bound of that delay (seconds).
    max_backoff: int = 60
    #: Seconds a consumer remembers handled message ids and drops repeats (SQS FIFO's
    #: deduplication interval is 5 minutes).
    dedup_window: float = 300.0
    #: Seconds a queue keeps messages (the store is the record, not the queue).
    retention: int = 4 * 86400
    #: Seconds a dead-letter queue keeps messages.
    dlq_retention: int = 14 * 86400
    #: PublishBatch calls in flight at once (different message groups only).
    max_pending: int = 4
    #: Credentials (from the URL's ``user:password@``); empty: the AWS default chain.
    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    @classmethod
    def from_url(cls, url: str) -> SnsSqsOptions:
        """Parse ``sns+sqs://[key:secret@]region[?option=value&...]``."""
        parts = urlsplit(url)
        if parts.scheme != "sns+sqs":
            raise BrokerError(f"not an sns+sqs:// URL: {redact_url(url)!r}")
        known = {
            f.name: f for f in fields(cls) if f.name not in ("region", "access_key", "secret_key")
        }
        values: dict[str, object] = {}
        for key, raw in parse_qsl(parts.query, keep_blank_values=True):
            f = known.get(key)
            if f is None:
                raise BrokerError(
                    f"unknown sns+sqs:// option {key!r} in {redact_url(url)!r} "
                    f"(known: {', '.join(known)})"
                )
            try:
                values[key] = _CONVERT[str(f.type)](raw)
            except ValueError:
                raise BrokerError(f"sns+sqs:// option {key}={raw!r} is not a {f.type}") from None
        opts = cls(
            region=parts.hostname or "us-east-1",
            access_key=unquote(parts.username or ""),
            secret_key=unquote(parts.password or ""),
            **values,  # type: ignore[arg-type]
        )
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ``BrokerError`` for settings SNS/SQS or the adapter cannot use."""
        problems = []
        if not _REGION.match(self.region):
            problems.append(f"region {self.region!r} is not an AWS region name")
        if not _PREFIX.match(self.prefix) or len(self.prefix) > 20:
            problems.append(f"prefix {self.prefix!r} must be [A-Za-z0-9_-]{{0,20}}")
        if not 1 <= self.max_receive <= 1000:
            problems.append("max_receive must be 1..1000 (SQS maxReceiveCount)")
        if not 1 <= self.visibility <= 43200:
            problems.append("visibility must be 1..43200 seconds")
        if not 0 <= self.wait <= 20:
            problems.append("wait must be 0..20 seconds (SQS long polling)")
        if not 1 <= self.batch <= 10:
            problems.append("batch must be 1..10 (SQS ReceiveMessage)")
        if self.timeout <= 0:
            problems.append("timeout must be > 0")
        if not 0 <= self.backoff <= self.max_backoff <= 43200:
            problems.append("backoff must be 0..max_backoff, max_backoff at most 43200")
        if self.dedup_window < 0:
            problems.append("dedup_window must be >= 0")
        if not 60 <= self.retention <= 1209600 or not 60 <= self.dlq_retention <= 1209600:
            problems.append("retention and dlq_retention must be 60..1209600 seconds")
        if self.max_pending < 1:
            problems.append("max_pending must be >= 1")
        if bool(self.access_key) != bool(self.secret_key):
            problems.append("give both the access key and the secret (key:secret@region)")
        if problems:
            raise BrokerError("bad sns+sqs:// options: " + "; ".join(problems))

    # -- the mapping ------------------------------------------------------------------------

    def _name(self, base: str, limit: int) -> str:
        suffix = ".fifo" if self.fifo else ""
        head = f"{self.prefix}-" if self.prefix else ""
        name = f"{head}{base}"
        room = limit - len(suffix)
        if len(name) > room:  # keep names unique when they must be cut
            name = f"{name[: room - 9]}_{zlib.crc32(name.encode()):08x}"
        return name + suffix

    def topic_name(self, topic: str) -> str:
        """The SNS topic of a reventless topic: ``[<prefix>-]<Topic>EventTopic[.fifo]``."""
        return self._name(f"{token(topic)}EventTopic", 256)

    def queue_name(self, group: str) -> str:
        """The SQS queue of a consumer group (a collector): ``[<prefix>-]<group>[.fifo]``."""
        return self._name(token(group), 80 - 4)  # room for the DLQ's "-dlq"

    def dlq_name(self, group: str) -> str:
        """The dead-letter queue of a group's queue: ``[<prefix>-]<group>-dlq[.fifo]``."""
        base = self.queue_name(group).removesuffix(".fifo")
        return base + "-dlq" + (".fifo" if self.fifo else "")

    def group_id(self, topic: str, key: str) -> str:
        """The ``MessageGroupId`` of a message: topic and partition key (order is kept per
        group, and groups of one queue are consumed in parallel)."""
        gid = f"{token(topic)}/{key}"
        return gid if _DEDUP_SAFE.match(gid) else hashlib.sha256(gid.encode()).hexdigest()

    @staticmethod
    def dedup_id(msg_id: str) -> str:
        """The ``MessageDeduplicationId`` of a message: its id (hashed if SNS would refuse it)."""
        return msg_id if _DEDUP_SAFE.match(msg_id) else hashlib.sha256(msg_id.encode()).hexdigest()

    def base_group(self, group: str) -> str:
        """The collector a consumer group belongs to (``name.m0of2`` -> ``name``, a leased
        group's ``name.lease.<topic>.<partition>`` -> ``name``)."""
        return re.sub(r"\.(m\d+of\d+|lease\..+\.\d+)$", "", group)
