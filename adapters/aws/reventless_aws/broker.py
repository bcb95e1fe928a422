"""``SnsSqsBroker``: the reventless Broker port on AWS SNS and SQS (aiobotocore).

Each topic is an SNS FIFO topic ``<Topic>EventTopic.fifo``; a message's ``MessageGroupId``
is its topic and partition key (per-aggregate order), its ``MessageDeduplicationId`` its
id. Each consumer group (a collector) is one SQS FIFO queue with a dead-letter queue,
subscribed to the group's topics with raw message delivery. Every call is a batch call.
See ``adapters/aws/README.md``.

Example::

    broker = SnsSqsBroker.from_url("sns+sqs://us-east-1?endpoint=http://127.0.0.1:5000")
    await broker.connect()
    await broker.declare("Customer")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from reventless.broker import BrokerCapabilities, Handler, Message
from reventless.errors import BrokerError

from . import codec
from .codec import MessageTooLargeError
from .options import MAX_PAYLOAD_BYTES, MAX_REQUEST_BYTES, SnsSqsOptions
from .pump import Member, Pump, PumpSession, as_dict
from .queues import QueueOps

if TYPE_CHECKING:
    from types_aiobotocore_sns.client import SNSClient
    from types_aiobotocore_sqs.client import SQSClient

log = logging.getLogger("reventless.broker.aws")


class SnsSqsSubscription:
    """Handle returned by ``SnsSqsBroker.subscribe``."""

    def __init__(self, pump: Pump, member: Member) -> None:
        self._pump, self._member = pump, member

    async def close(self) -> None:
        """Leave the group; the last member in this process stops the receive loop (the
        queue keeps what arrives meanwhile, and the group resumes where it left off)."""
        await self._pump.leave(self._member)


class SnsSqsBroker(QueueOps):
    """The Broker port on SNS -> SQS (``sns+sqs://region?option=value``).

    Example::

        broker = SnsSqsBroker.from_url("sns+sqs://eu-west-1?prefix=shop")
        await broker.connect()
        await broker.subscribe("audit", ["Customer"], handler)
    """

    #: The relay splits its batches so that each message's payload fits this (base64 and
    #: attributes included, a message stays under SNS's 256 KiB).
    max_message_bytes = MAX_PAYLOAD_BYTES
    #: ``subscribe`` takes ``types=``: collectors pass the event types they need, and SNS
    #: filter policies drop the messages holding none of them.
    filters_types = True
    #: Both of the above, as the core reads them.
    capabilities = BrokerCapabilities(max_message_bytes=MAX_PAYLOAD_BYTES, filters_types=True)

    def __init__(self, options: SnsSqsOptions | None = None) -> None:
        self.options = options or SnsSqsOptions()
        self.options.validate()
        self._stack: AsyncExitStack | None = None
        self._sns_client: SNSClient | None = None
        self._sqs_client: SQSClient | None = None
        self._connect_lock = asyncio.Lock()
        self._declare_lock = asyncio.Lock()
        self._subscribe_lock = asyncio.Lock()
        self._topic_arns: dict[str, str] = {}
        self._created: set[str] = set()
        self._queues: dict[str, tuple[str, str]] = {}  # group -> (queue url, dlq url)
        self._pumps: dict[str, Pump] = {}
        self._session = PumpSession(
            self.options,
            self._receive,
            self._delete,
            self._change_visibility,
            self._to_dlq,
            self._count_duplicate,
            self._drop_pump,
        )
        self._stopping: dict[str, asyncio.Task[None]] = {}
        #: Messages SNS took / consumers dropped as repeats / HTTP requests sent to AWS.
        self.published = 0
        self.duplicates_dropped = 0
        self.api_calls = 0
        #: HTTP requests per operation (``PublishBatch``, ``ReceiveMessage``, ...).
        self.calls: Counter[str] = Counter()

    @classmethod
    def from_url(cls, url: str) -> SnsSqsBroker:
        """``sns+sqs://[key:secret@]region[?endpoint=...&prefix=...&...]`` (see
        ``SnsSqsOptions`` for every option)."""
        return cls(SnsSqsOptions.from_url(url))

    # -- connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Open the SNS and SQS clients (idempotent); ``BrokerError`` if SQS does not answer."""
        async with self._connect_lock:
            if self._stack is not None:
                return
            o = self.options
            session = get_session()
            kw: dict[str, Any] = {
                "region_name": o.region,
                "config": AioConfig(
                    retries={"max_attempts": 3, "mode": "standard"},
                    connect_timeout=min(5.0, o.timeout),
                    read_timeout=o.wait + o.timeout,
                    max_pool_connections=50,
                ),
            }
            if o.endpoint:
                kw["endpoint_url"] = o.endpoint
            if o.access_key:
                kw["aws_access_key_id"] = o.access_key
                kw["aws_secret_access_key"] = o.secret_key
            stack = AsyncExitStack()
            try:
                sns = await stack.enter_async_context(session.create_client("sns", **kw))
                sqs = await stack.enter_async_context(session.create_client("sqs", **kw))
                for client in (sns, sqs):
                    client.meta.events.register("before-send", self._count)
                await sqs.list_queues(MaxResults=1, QueueNamePrefix=o.prefix or "rv")
            except Exception as exc:
                await stack.aclose()
                raise BrokerError(
                    f"cannot reach SQS in {o.region} at {o.endpoint or 'the AWS endpoint'}: {exc}"
                ) from exc
            self._stack, self._sns_client, self._sqs_client = stack, sns, sqs

    def _count(self, event_name: str = "", **_: Any) -> None:
        self.api_calls += 1
        self.calls[event_name.rsplit(".", 1)[-1]] += 1

    def _sns(self) -> SNSClient:
        if self._sns_client is None:
            raise BrokerError("the SNS/SQS broker is not connected (call connect() first)")
        return self._sns_client

    def _sqs(self) -> SQSClient:
        if self._sqs_client is None:
            raise BrokerError("the SNS/SQS broker is not connected (call connect() first)")
        return self._sqs_client

    async def close(self) -> None:
        """Stop every receive loop (running handlers finish), then close the clients."""
        pumps = list(self._pumps.values())
        self._pumps.clear()
        for pump in pumps:
            pump.members.clear()
        await asyncio.gather(
            *(p.stop() for p in pumps), *self._stopping.values(), return_exceptions=True
        )
        self._stopping.clear()
        stack, self._stack = self._stack, None
        self._sns_client = self._sqs_client = None
        self._topic_arns.clear()
        self._queues.clear()
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    def delivers_in_order(self, group: str) -> bool:
        """Whether ``group`` gets each message group in order (FIFO); the App refuses to
        bind a collector that needs order to an unordered (standard) channel."""
        return self.options.fifo

    # -- declare ----------------------------------------------------------------------------

    async def declare(self, topic: str) -> None:
        """Create the topic's SNS topic (idempotent), or find it when ``create=false``."""
        if topic in self._topic_arns:
            return
        async with self._declare_lock:
            if topic in self._topic_arns:
                return
            self._topic_arns[topic] = await self._ensure_topic(topic)

    async def _ensure_topic(self, topic: str) -> str:
        o = self.options
        name = o.topic_name(topic)
        sns = self._sns()
        if not o.create:
            return await self._find_topic(name)
        attrs = {"FifoTopic": "true", "ContentBasedDeduplication": "false"} if o.fifo else {}
        try:
            arn = (await sns.create_topic(Name=name, Attributes=attrs))["TopicArn"]
        except Exception as exc:
            raise BrokerError(f"cannot create SNS topic {name} for topic {topic!r}: {exc}") from exc
        self._created.add(topic)
        return arn

    async def _find_topic(self, name: str) -> str:
        kw: dict[str, str] = {}
        while True:
            try:
                page = await self._sns().list_topics(**kw)
            except Exception as exc:
                raise BrokerError(f"cannot list SNS topics: {exc}") from exc
            for t in page.get("Topics", []):
                arn = t.get("TopicArn", "")
                if arn.rsplit(":", 1)[-1] == name:
                    return arn
            token = page.get("NextToken")
            if not token:
                raise BrokerError(
                    f"SNS topic {name} does not exist (create=false: deploy the "
                    "CloudFormation template from `reventless infra synth` first)"
                )
            kw = {"NextToken": token}

    async def undeclare(self, topic: str) -> None:
        """Undo ``declare`` for a failed build: delete the SNS topic if this broker created it."""
        arn = self._topic_arns.pop(topic, None)
        if arn is None or topic not in self._created:
            return
        self._created.discard(topic)
        try:
            await self._sns().delete_topic(TopicArn=arn)
        except Exception as exc:
            raise BrokerError(f"cannot delete the SNS topic of {topic!r}: {exc}") from exc

    def topic_arn(self, topic: str) -> str:
        """The ARN of a declared topic."""
        try:
            return self._topic_arns[topic]
        except KeyError:
            raise BrokerError(f"topic {topic!r} is not declared") from None

    # -- publish ----------------------------------------------------------------------------

    async def publish(self, messages: Sequence[Message]) -> None:
        """PublishBatch (10 messages and at most 256 KiB per call), order kept per message
        group; raise ``BrokerError`` unless SNS took every message, and
        ``MessageTooLargeError`` (sending nothing) if one cannot fit a publish."""
        if not messages:
            return
        sized = [(m, codec.entry_size(m)) for m in messages]
        big = [(m, s) for m, s in sized if s > MAX_REQUEST_BYTES]
        if big:
            m, s = big[0]
            raise MessageTooLargeError(
                f"message {m.msg_id} of topic {m.topic} is {s} bytes with its attributes, over "
                f"the SNS limit of {MAX_REQUEST_BYTES} ({len(big)} such message(s); nothing "
                "was published: split the batch, or keep single events under "
                f"{MAX_PAYLOAD_BYTES} bytes)"
            )
        for topic in dict.fromkeys(m.topic for m in messages):
            await self.declare(topic)
        # Lanes: one message group always goes to the same lane, and each lane sends its
        # batches one after another, so per-group order holds with calls in parallel.
        # A topic's messages that fit one PublishBatch go in one call (fewest calls).
        by_topic: dict[str, list[tuple[Message, int]]] = {}
        for m, s in sized:
            by_topic.setdefault(m.topic, []).append((m, s))
        lanes: dict[tuple[str, int], list[tuple[Message, int]]] = {}
        width = self.options.max_pending
        for topic, items in by_topic.items():
            if len(items) <= 10 and sum(s for _, s in items) <= MAX_REQUEST_BYTES:
                lanes[(topic, 0)] = items
                continue
            for m, s in items:
                lane = hash(self.options.group_id(m.topic, m.key)) % width
                lanes.setdefault((m.topic, lane), []).append((m, s))
        results = await asyncio.gather(
            *(self._send_lane(topic, items) for (topic, _), items in lanes.items()),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise BrokerError(f"SNS publish failed: {errors[0]}") from errors[0]

    async def _send_lane(self, topic: str, items: list[tuple[Message, int]]) -> None:
        arn = self.topic_arn(topic)
        batch: list[Message] = []
        size = 0
        for m, s in items:
            if batch and (len(batch) == 10 or size + s > MAX_REQUEST_BYTES):
                await self._publish_batch(arn, batch)
                batch, size = [], 0
            batch.append(m)
            size += s
        if batch:
            await self._publish_batch(arn, batch)

    async def _publish_batch(self, arn: str, batch: list[Message]) -> None:
        o = self.options
        entries: list[Any] = []
        for i, m in enumerate(batch):
            entry: dict[str, Any] = {
                "Id": str(i),
                "Message": codec.body(m),
                "MessageAttributes": codec.attributes(m),
            }
            if o.fifo:
                entry["MessageGroupId"] = o.group_id(m.topic, m.key)
                entry["MessageDeduplicationId"] = o.dedup_id(m.msg_id)
            entries.append(entry)
        try:
            got = await self._sns().publish_batch(TopicArn=arn, PublishBatchRequestEntries=entries)
        except Exception as exc:
            raise BrokerError(f"PublishBatch to {arn} failed: {exc}") from exc
        failed = got.get("Failed", [])
        self.published += len(got.get("Successful", []))
        if failed:
            first = failed[0]
            raise BrokerError(
                f"SNS refused {len(failed)} of {len(batch)} message(s) to {arn}: "
                f"{first.get('Code')}: {first.get('Message')}"
            )

    # -- subscribe --------------------------------------------------------------------------

    async def subscribe(
        self,
        group: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        partitions: Collection[int] | None = None,
        types: Mapping[str, Collection[str]] | None = None,
    ) -> SnsSqsSubscription:
        """Join ``group`` on ``topics``: the group's queue (created with its DLQ and
        subscribed to the topics, unless ``create=false``) and one receive loop per process,
        shared by this process's members (split by ``crc32(key)``).

        ``types`` (per topic, the event types the group needs, when fewer than all) become
        a filter policy on the ``rv-types`` attribute of the subscription, so SNS drops
        messages that hold none of them; ``partitions`` one on the partition key."""
        self._sqs()
        async with self._subscribe_lock:
            for topic in dict.fromkeys(topics):
                await self.declare(topic)
            queue_url, dlq_url = await self._ensure_queue(group, topics, partitions, types)
            stopping = self._stopping.pop(group, None)
            if stopping is not None:  # one receive loop per queue and process at a time
                await asyncio.gather(stopping, return_exceptions=True)
            pump = self._pumps.get(group)
            fresh = pump is None
            if pump is None:
                pump = self._pumps[group] = Pump(self._session, group, queue_url, dlq_url)
            member = Member(handler, None if partitions is None else frozenset(partitions))
            pump.members.append(member)
            if fresh:
                pump.start()
            return SnsSqsSubscription(pump, member)

    async def _receive(self, queue_url: str) -> list[dict[str, Any]]:
        """The ``PumpSession.receive`` of this broker's pumps: one long poll."""
        o = self.options
        got = await self._sqs().receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=o.batch,
            WaitTimeSeconds=o.wait,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        return [as_dict(r) for r in got.get("Messages", [])]

    def _count_duplicate(self) -> None:
        self.duplicates_dropped += 1

    async def _drop_pump(self, pump: Pump) -> None:
        """Stop a group's receive loop in the background: a long poll in flight ends within
        ``wait`` seconds and releases what it got; ``close`` (or a new subscription of the
        group) waits for it, so closing many groups takes one ``wait``, not one each."""
        if self._pumps.get(pump.group) is pump:
            del self._pumps[pump.group]
        task = asyncio.get_running_loop().create_task(pump.stop())
        self._stopping[pump.group] = task

    async def queue_urls(self, group: str) -> tuple[str, str]:
        """(queue URL, dead-letter queue URL) of ``group`` (looked up, never created)."""
        if group in self._queues:
            return self._queues[group]
        o = self.options
        urls = (
            await self._queue_url(o.queue_name(group)),
            await self._queue_url(o.dlq_name(group)),
        )
        self._queues[group] = urls
        return urls

    async def _queue_url(self, name: str) -> str:
        try:
            return (await self._sqs().get_queue_url(QueueName=name))["QueueUrl"]
        except Exception as exc:
            raise BrokerError(f"SQS queue {name} is not reachable: {exc}") from exc

    async def _ensure_queue(
        self,
        group: str,
        topics: Sequence[str],
        partitions: Collection[int] | None,
        types: Mapping[str, Collection[str]] | None = None,
    ) -> tuple[str, str]:
        if not self.options.create:
            return await self.queue_urls(group)
        o = self.options
        sqs = self._sqs()
        fifo: dict[Any, str] = {"FifoQueue": "true"} if o.fifo else {}
        try:
            dlq_url = (
                await sqs.create_queue(
                    QueueName=o.dlq_name(group),
                    Attributes={**fifo, "MessageRetentionPeriod": str(o.dlq_retention)},
                )
            )["QueueUrl"]
            dlq_arn = await self._queue_arn(dlq_url)
            attrs: dict[Any, str] = {
                **fifo,
                "VisibilityTimeout": str(o.visibility),
                "MessageRetentionPeriod": str(o.retention),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": self.redrive_count}
                ),
            }
            if o.fifo:  # high-throughput FIFO: dedup and limits per message group
                attrs |= {
                    "DeduplicationScope": "messageGroup",
                    "FifoThroughputLimit": "perMessageGroupId",
                }
            queue_url = (await sqs.create_queue(QueueName=o.queue_name(group), Attributes=attrs))[
                "QueueUrl"
            ]
            queue_arn = await self._queue_arn(queue_url)
            await sqs.set_queue_attributes(
                QueueUrl=queue_url,
                Attributes={"Policy": json.dumps(self.queue_policy(queue_arn))},
            )
            for topic in dict.fromkeys(topics):
                wanted = (types or {}).get(topic)
                await self._subscribe_queue(topic, queue_arn, partitions, wanted)
        except BrokerError:
            raise
        except Exception as exc:
            raise BrokerError(f"cannot set up the SQS queue of group {group!r}: {exc}") from exc
        self._queues[group] = (queue_url, dlq_url)
        return queue_url, dlq_url

    @property
    def redrive_count(self) -> int:
        """The queues' ``maxReceiveCount``: a safety net above ``max_receive``. The adapter
        dead-letters a failing message itself (recording its error); SQS's redrive moves a
        message whose consumers never finished it, e.g. because they crashed. Messages that
        wait behind a failing one in their group are received with it, so the net is wider."""
        return 2 * self.options.max_receive + 1

    def queue_policy(self, queue_arn: str) -> dict[str, Any]:
        """The queue policy letting this app's SNS topics send to the queue."""
        region, account = queue_arn.split(":")[3:5]
        head = f"{self.options.prefix}-" if self.options.prefix else ""
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "reventless-sns",
                    "Effect": "Allow",
                    "Principal": {"Service": "sns.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": queue_arn,
                    "Condition": {
                        "ArnLike": {"aws:SourceArn": f"arn:aws:sns:{region}:{account}:{head}*"}
                    },
                }
            ],
        }

    async def _queue_arn(self, url: str) -> str:
        got = await self._sqs().get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return got["Attributes"]["QueueArn"]

    async def _subscribe_queue(
        self,
        topic: str,
        queue_arn: str,
        partitions: Collection[int] | None,
        types: Collection[str] | None = None,
    ) -> None:
        attrs = {"RawMessageDelivery": "true"}
        policy = codec.filter_policy(partitions, types)
        if policy:
            attrs["FilterPolicy"] = json.dumps(policy)
        await self._sns().subscribe(
            TopicArn=self.topic_arn(topic),
            Protocol="sqs",
            Endpoint=queue_arn,
            Attributes=attrs,
            ReturnSubscriptionArn=True,
        )

    # -- introspection ----------------------------------------------------------------------

    async def queue_depth(self, group: str) -> tuple[int, int]:
        """(messages in the queue, messages in its dead-letter queue), approximately."""
        out = []
        for url in await self.queue_urls(group):
            got = await self._sqs().get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )
            a = got["Attributes"]
            out.append(
                int(a.get("ApproximateNumberOfMessages", 0))
                + int(a.get("ApproximateNumberOfMessagesNotVisible", 0))
            )
        return out[0], out[1]
