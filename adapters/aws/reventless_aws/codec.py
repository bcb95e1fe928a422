"""How a ``Message`` travels through SNS and SQS: body and message attributes.

SNS carries text, so the payload (Arrow IPC bytes) is base64 in the body. The topic, the
message id, the partition key and the headers travel as message attributes (raw delivery
hands them to SQS unchanged); ``rv-types`` (the event types in the message, when the
relay names them) is a ``String.Array`` attribute that SNS filter policies can match.

Example::

    entry_size(msg) <= MAX_REQUEST_BYTES
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Mapping
from typing import Any

from reventless.broker import Message
from reventless.errors import BrokerError

#: Message attributes the adapter owns.
TOPIC, MSG_ID, KEY, HEADERS, TYPES = "rv-topic", "rv-id", "rv-key", "rv-headers", "rv-types"
#: Attributes added when a message is dead-lettered by the adapter.
ERROR, COMPONENT, RECEIVES = "rv-error", "rv-component", "rv-receives"
#: The relay header listing a message's event types (comma separated).
TYPES_HEADER = "rv-types"
#: W3C trace context headers: message attributes of their own (where OpenTelemetry's
#: SQS instrumentation and other consumers look for them), not inside ``rv-headers``.
TRACE_HEADERS = ("traceparent", "tracestate")


#: SNS allows at most 150 values in one filter policy (the product over its keys).
MAX_FILTER_VALUES = 150


def filter_policy(
    partitions: Collection[int] | None, types: Collection[str] | None
) -> dict[str, list[str]] | None:
    """The SNS filter policy of a subscription: only the topic partitions of a collector
    group's member or lease (``rv-key``), only messages holding one of ``types``
    (``rv-types``, a ``String.Array``: one match passes). A key that would take the policy
    past SNS's limit is left out (the collector filters what arrives again); the
    partitions go first, they decide which member a message is for. None: no filter."""
    policy: dict[str, list[str]] = {}
    if partitions and len(partitions) <= MAX_FILTER_VALUES:
        policy[KEY] = [str(p) for p in sorted(partitions)]
    if types and len(types) * len(policy.get(KEY, [""])) <= MAX_FILTER_VALUES:
        policy[TYPES] = sorted(types)
    return policy or None


class MessageTooLargeError(BrokerError):
    """A message cannot fit one SNS publish (256 KiB with its attributes); nothing of the
    publish call was sent. The relay splits its batches to fit, so only a single event
    larger than the limit gets here."""


def attributes(msg: Message) -> dict[str, dict[str, str]]:
    """The SNS ``MessageAttributes`` of ``msg`` (``DataType`` + ``StringValue``)."""
    out = {
        TOPIC: {"DataType": "String", "StringValue": msg.topic},
        MSG_ID: {"DataType": "String", "StringValue": msg.msg_id},
    }
    if msg.key:
        out[KEY] = {"DataType": "String", "StringValue": msg.key}
    headers = dict(msg.headers)
    for name in TRACE_HEADERS:
        value = headers.pop(name, None)
        if value:
            out[name] = {"DataType": "String", "StringValue": value}
    types = headers.get(TYPES_HEADER)
    if types:
        out[TYPES] = {"DataType": "String.Array", "StringValue": json.dumps(types.split(","))}
    if headers:
        out[HEADERS] = {"DataType": "String", "StringValue": json.dumps(headers)}
    return out


def body(msg: Message) -> str:
    """The SNS message body: the payload in base64."""
    return base64.b64encode(msg.data).decode("ascii")


def entry_size(msg: Message) -> int:
    """Bytes ``msg`` counts against the 256 KiB limit (body + attribute names, types, values)."""
    size = (len(msg.data) + 2) // 3 * 4
    for name, attr in attributes(msg).items():
        size += len(name) + len(attr["DataType"]) + len(attr["StringValue"].encode())
    return size


def to_message(raw: Mapping[str, Any]) -> Message:
    """The ``Message`` of an SQS message delivered raw from SNS; ``BrokerError`` if it is
    not one of ours (missing attributes, bad base64)."""
    attrs = raw.get("MessageAttributes") or {}

    def text(name: str) -> str:
        a = attrs.get(name)
        return str(a.get("StringValue", "")) if a else ""

    topic, msg_id = text(TOPIC), text(MSG_ID)
    if not topic or not msg_id:
        raise BrokerError(f"SQS message {raw.get('MessageId')} has no {TOPIC}/{MSG_ID} attribute")
    try:
        data = base64.b64decode(raw.get("Body", ""), validate=True)
        headers = json.loads(text(HEADERS)) if text(HEADERS) else {}
    except (binascii.Error, ValueError) as exc:
        raise BrokerError(f"SQS message {raw.get('MessageId')} is malformed: {exc}") from exc
    for name in TRACE_HEADERS:
        if text(name):
            headers[name] = text(name)
    return Message(topic=topic, data=data, msg_id=msg_id, headers=headers, key=text(KEY))
