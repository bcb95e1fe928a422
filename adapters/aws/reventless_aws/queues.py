"""The SQS side of ``SnsSqsBroker`` that works on existing queues: the batch calls of the
receive loop (delete, change visibility, move to the dead-letter queue) and the
dead-letter listing and redrive."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from reventless.deadletter import DeadLetter
from reventless.errors import BrokerError

from . import codec
from .options import SnsSqsOptions
from .pump import as_dict

if TYPE_CHECKING:
    from types_aiobotocore_sqs.client import SQSClient

log = logging.getLogger("reventless.broker.aws")


class QueueOps:
    """Mixed into ``SnsSqsBroker``, which provides the client, options and queue URLs."""

    options: SnsSqsOptions
    _queues: dict[str, tuple[str, str]]

    def _sqs(self) -> SQSClient:
        raise NotImplementedError

    async def queue_urls(self, group: str) -> tuple[str, str]:
        raise NotImplementedError

    @property
    def redrive_count(self) -> int:
        raise NotImplementedError

    # -- batch helpers (used by the receive loop) -------------------------------------------

    async def _delete(self, queue_url: str, receipts: list[str]) -> None:
        for i in range(0, len(receipts), 10):
            chunk = receipts[i : i + 10]
            try:
                got = await self._sqs().delete_message_batch(
                    QueueUrl=queue_url,
                    Entries=[{"Id": str(n), "ReceiptHandle": r} for n, r in enumerate(chunk)],
                )
            except Exception as exc:  # the messages come again: consumers skip repeats
                log.warning("DeleteMessageBatch on %s failed: %r", queue_url, exc)
                continue
            if got.get("Failed"):
                log.warning("DeleteMessageBatch on %s: %s", queue_url, got["Failed"][:3])

    async def _change_visibility(self, queue_url: str, receipts: list[str], seconds: int) -> None:
        for i in range(0, len(receipts), 10):
            chunk = receipts[i : i + 10]
            try:
                await self._sqs().change_message_visibility_batch(
                    QueueUrl=queue_url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": r, "VisibilityTimeout": seconds}
                        for n, r in enumerate(chunk)
                    ],
                )
            except Exception as exc:
                raise BrokerError(f"ChangeMessageVisibilityBatch failed: {exc}") from exc

    async def _to_dlq(self, dlq_url: str, items: list[tuple[dict[str, Any], str, str]]) -> None:
        """Send (raw message, error, group) to a dead-letter queue with the error attached."""
        for i in range(0, len(items), 10):
            entries: list[Any] = []
            for n, (raw, error, group) in enumerate(items[i : i + 10]):
                attrs = {
                    k: v
                    for k, v in (raw.get("MessageAttributes") or {}).items()
                    if k not in (codec.ERROR, codec.COMPONENT, codec.RECEIVES)
                }
                receives = str(raw.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
                attrs[codec.ERROR] = {"DataType": "String", "StringValue": error or "-"}
                attrs[codec.COMPONENT] = {"DataType": "String", "StringValue": group}
                attrs[codec.RECEIVES] = {"DataType": "Number", "StringValue": receives}
                entries.append(self._entry(str(n), raw, attrs))
            try:
                got = await self._sqs().send_message_batch(QueueUrl=dlq_url, Entries=entries)
            except Exception as exc:
                raise BrokerError(f"cannot move messages to {dlq_url}: {exc}") from exc
            if got.get("Failed"):
                raise BrokerError(f"the dead-letter queue refused messages: {got['Failed'][:3]}")

    def _entry(self, entry_id: str, raw: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "Id": entry_id,
            "MessageBody": raw.get("Body") or "-",
            "MessageAttributes": attrs,
        }
        if self.options.fifo:
            topic = attrs.get(codec.TOPIC, {}).get("StringValue", "")
            key = attrs.get(codec.KEY, {}).get("StringValue", "")
            entry["MessageGroupId"] = self.options.group_id(topic, key)
            # A fresh id: the original's would be dropped within the deduplication interval.
            entry["MessageDeduplicationId"] = hashlib.sha256(
                f"{raw.get('MessageId')}:{uuid.uuid4()}".encode()
            ).hexdigest()
        return entry

    # -- dead letters -----------------------------------------------------------------------

    async def _drain(self, url: str, visibility: int) -> list[dict[str, Any]]:
        """Receive what a queue holds (the oldest ten per message group), leaving it
        invisible for ``visibility`` seconds."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for _ in range(100):
            got = await self._sqs().receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                VisibilityTimeout=visibility,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            )
            fresh = [as_dict(r) for r in got.get("Messages", []) if r["MessageId"] not in seen]
            if not fresh:
                break
            seen.update(r["MessageId"] for r in fresh)
            out.extend(fresh)
        return out

    async def dead_letters(self, group: str | None = None) -> list[DeadLetter]:
        """Messages in the dead-letter queues of ``group`` (or of every group this broker
        subscribed), with component and error, oldest first per message group. Up to ten
        per message group are shown (an SQS FIFO queue hides the rest of a group while
        some of it is received)."""
        groups = [group] if group is not None else list(self._queues)
        out: list[DeadLetter] = []
        for g in groups:
            try:
                _, dlq = await self.queue_urls(g)
            except BrokerError:
                log.debug("group %s has no queues here: no dead letters", g)
                continue
            raws = await self._drain(dlq, 5)
            if raws:
                await self._change_visibility(dlq, [str(r["ReceiptHandle"]) for r in raws], 0)
            out.extend(self._letter(g, r) for r in raws)
        return out

    def _letter(self, group: str, raw: dict[str, Any]) -> DeadLetter:
        attrs = raw.get("MessageAttributes") or {}

        def text(name: str) -> str:
            return str(attrs.get(name, {}).get("StringValue", ""))

        receives = int(raw.get("Attributes", {}).get("ApproximateReceiveCount", "0"))
        headers = json.loads(text(codec.HEADERS) or "{}")
        first, last = headers.get("rv-first", "0"), headers.get("rv-last", "")
        return DeadLetter(
            id=0,
            component=text(codec.COMPONENT) or self.options.base_group(group),
            topic=text(codec.TOPIC),
            offset=int(first) if str(first).isdigit() else 0,
            aggregate_id=None,
            msg_id=text(codec.MSG_ID) or str(raw.get("MessageId")),
            event_type=f"sqs message (offsets {first}-{last}, key {text(codec.KEY) or '-'})",
            error=text(codec.ERROR)
            or f"moved by SQS after {self.redrive_count} receives (no error recorded)",
            attempts=int(text(codec.RECEIVES) or receives),
            created_at_us=int(raw.get("Attributes", {}).get("SentTimestamp", "0")) * 1000,
        )

    async def redrive(self, group: str) -> int:
        """Move ``group``'s dead letters back to its queue, in order per message group;
        returns how many were moved."""
        queue, dlq = await self.queue_urls(group)
        moved = 0
        while True:
            got = await self._sqs().receive_message(
                QueueUrl=dlq,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=0,
                VisibilityTimeout=max(30, self.options.visibility),
                MessageAttributeNames=["All"],
            )
            raws = [as_dict(r) for r in got.get("Messages", [])]
            if not raws:
                return moved
            entries: list[Any] = []
            for n, raw in enumerate(raws):
                attrs = {
                    k: v
                    for k, v in (raw.get("MessageAttributes") or {}).items()
                    if k not in (codec.ERROR, codec.COMPONENT, codec.RECEIVES)
                }
                entries.append(self._entry(str(n), raw, attrs))
            sent = await self._sqs().send_message_batch(QueueUrl=queue, Entries=entries)
            if sent.get("Failed"):
                raise BrokerError(f"redrive of {group!r} failed: {sent['Failed'][:3]}")
            await self._delete(dlq, [str(r["ReceiptHandle"]) for r in raws])
            moved += len(raws)
            log.info("group %s: %d dead letter(s) moved back to the queue", group, moved)
