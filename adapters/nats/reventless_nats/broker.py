"""``JetStreamBroker``: the reventless Broker port on NATS JetStream.

One stream per topic (``RV_<topic>``, subjects ``rv.<topic>.<partition>``); publishes
carry ``Nats-Msg-Id`` so the server drops duplicates; each (group, topic) is a durable
pull consumer drained by one fetch loop per process, which hands batches to the group's
members by key. See ``adapters/nats/README.md``.

Example::

    broker = JetStreamBroker.from_url("nats://127.0.0.1:4222?partitions=16")
    await broker.connect()
    await broker.declare("Customer")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import replace

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    PubAck,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)

from reventless import telemetry
from reventless.broker import BrokerCapabilities, Handler, Message
from reventless.errors import BrokerError

from .options import NatsOptions
from .pump import Member, Pump, PumpSession

log = logging.getLogger("reventless.broker.nats")

#: Header the server deduplicates on (set from ``Message.msg_id``).
MSG_ID = "Nats-Msg-Id"
#: Header carrying ``Message.key`` (omitted when the key is empty).
KEY = "Rv-Key"
_EXPECTED_STREAM = "Nats-Expected-Stream"
_RESERVED = (MSG_ID, KEY, _EXPECTED_STREAM)
#: Bytes of ``max_payload`` kept for headers (ids, offsets, the event types).
_HEADER_ROOM = 8192
_STREAM_NAME_IN_USE = 10058
_STREAM_NOT_FOUND = 10059
#: Seconds to wait for the meta leader to list streams or consumers (it answers from
#: memory; no answer in time means none is there now, e.g. while one is elected).
_PROBE_TIMEOUT = 1.0
_CONSUMER_ALREADY_EXISTS = (10013, 10105, 10148)


class JetStreamSubscription:
    """Handle returned by ``JetStreamBroker.subscribe``."""

    def __init__(self, joined: list[tuple[Pump, Member]]) -> None:
        self._joined = joined

    async def close(self) -> None:
        """Leave the group on every topic; the last member of a (group, topic) stops its
        fetch loop (the durable consumer stays on the server and resumes later)."""
        joined, self._joined = self._joined, []
        for pump, member in joined:
            await pump.leave(member)


class JetStreamBroker:
    """The Broker port on NATS JetStream (``nats://host:4222?option=value``).

    Example::

        broker = JetStreamBroker.from_url("nats://127.0.0.1:4222?max_deliver=5")
        async with ...:
            await broker.subscribe("audit", ["Customer"], handler)
    """

    def __init__(self, options: NatsOptions | None = None) -> None:
        self.options = options or NatsOptions()
        self.options.validate()
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._connect_lock = asyncio.Lock()
        self._declare_lock = asyncio.Lock()
        self._subscribe_lock = asyncio.Lock()
        self._declared: set[str] = set()
        self._created: set[str] = set()  # streams this broker made
        self._pumps: dict[tuple[str, str, int | None], Pump] = {}
        self._session = PumpSession(
            self.options,
            self._prepare,
            self._declared.discard,
            self._to_message,
            self._drop_pump,
            self._consumer_exists,
        )
        self._last_error = ""
        #: Messages the server stored / dropped as duplicates / skipped as too large.
        self.published = 0
        self.duplicates_dropped = 0
        self.oversized_dropped = 0

    @property
    def max_message_bytes(self) -> int:
        """Payload bytes one message may carry: the server's ``max_payload`` (1 MiB by
        default) less room for the headers. The relay splits larger pages to fit."""
        limit = self._nc.max_payload if self._nc is not None else 1 << 20
        return max(1024, limit - _HEADER_ROOM)

    @property
    def capabilities(self) -> BrokerCapabilities:
        """The payload limit (``max_message_bytes``, known once connected); no filtering
        by event type (a consumer filters on its subject partition only)."""
        return BrokerCapabilities(max_message_bytes=self.max_message_bytes)

    @classmethod
    def from_url(cls, url: str) -> JetStreamBroker:
        """``nats://host:port[,host:port][?partitions=16&max_deliver=5&...]`` (see
        ``NatsOptions`` for every option)."""
        return cls(NatsOptions.from_url(url))

    # -- connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect (idempotent); raise ``BrokerError`` if no server answers with JetStream."""
        async with self._connect_lock:
            if self._nc is not None and not self._nc.is_closed:
                return
            o = self.options
            nc = NATS()
            # nats-py can wait forever closing a TLS socket whose handshake failed: the
            # first connect is bounded by its attempts' own timeouts, plus a margin.
            attempts = max(1, o.connect_retries) * len(o.servers)
            bound = attempts * (o.connect_timeout + o.reconnect_wait) + 5.0
            try:
                async with asyncio.timeout(bound):
                    await nc.connect(
                        servers=list(o.servers),
                        name=o.name,
                        allow_reconnect=True,
                        # Bounded while connecting first; unbounded (by default) afterwards.
                        max_reconnect_attempts=max(1, o.connect_retries),
                        reconnect_time_wait=o.reconnect_wait,  # type: ignore[arg-type]
                        connect_timeout=o.connect_timeout,  # type: ignore[arg-type]
                        ping_interval=o.ping_interval,  # type: ignore[arg-type]
                        max_outstanding_pings=o.max_pings_out,
                        error_cb=self._on_error,
                        disconnected_cb=self._on_disconnected,
                        reconnected_cb=self._on_reconnected,
                        closed_cb=self._on_closed,
                        **o.connect_options(),
                    )
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await nc.close()
                cause = self._last_error if isinstance(exc, TimeoutError) else ""
                raise BrokerError(
                    f"cannot connect to NATS at {', '.join(o.servers)}: {cause or repr(exc)}"
                ) from exc
            nc.options["max_reconnect_attempts"] = o.max_reconnects
            js = nc.jetstream(publish_async_max_pending=o.max_pending)
            try:
                await js.account_info()
            except Exception as exc:
                with contextlib.suppress(Exception):
                    await nc.close()
                raise BrokerError(
                    f"JetStream is not available at {', '.join(o.servers)} "
                    f"(is nats-server running with -js?): {exc!r}"
                ) from exc
            self._nc, self._js = nc, js
            self._declared.clear()
            self._last_error = ""

    def _jetstream(self) -> JetStreamContext:
        if self._js is None or self._nc is None or self._nc.is_closed:
            raise BrokerError("the NATS broker is not connected (call connect() first)")
        return self._js

    async def _on_error(self, exc: Exception) -> None:
        text = repr(exc)
        level = logging.DEBUG if text == self._last_error else logging.WARNING
        self._last_error = text
        log.log(level, "NATS: %s", text)

    async def _on_disconnected(self) -> None:
        if self._nc is not None:  # else: close() is closing it
            log.warning("NATS: disconnected, reconnecting", extra=telemetry.fields("nats"))

    async def _on_reconnected(self) -> None:
        self._last_error = ""
        url = self._nc.connected_url if self._nc is not None else None
        log.warning(
            "NATS: reconnected to %s", url.netloc if url else "?", extra=telemetry.fields("nats")
        )

    async def _on_closed(self) -> None:
        log.info("NATS: connection closed")

    async def close(self) -> None:
        """Stop every fetch loop (running handlers finish), then drain and close."""
        pumps = list(self._pumps.values())
        self._pumps.clear()
        for pump in pumps:
            pump.members.clear()
            await pump.stop()
        nc, self._nc, self._js = self._nc, None, None
        self._declared.clear()
        if nc is None or nc.is_closed:
            return
        try:
            if nc.is_connected:
                async with asyncio.timeout(5.0):
                    await nc.drain()
        except Exception as exc:
            log.debug("NATS drain failed: %r", exc)
        finally:
            if not nc.is_closed:
                with contextlib.suppress(Exception):
                    await nc.close()

    # -- names ------------------------------------------------------------------------------

    def stream_name(self, topic: str) -> str:
        """The JetStream stream of ``topic``."""
        return self.options.stream_name(topic)

    def subject(self, topic: str, key: str) -> str:
        """The subject a message of ``topic`` with partition key ``key`` goes to."""
        return self.options.subject(topic, key)

    # -- declare ----------------------------------------------------------------------------

    async def declare(self, topic: str) -> None:
        """Create the topic's stream, or add its subjects to an existing one (idempotent)."""
        if topic in self._declared:
            return
        async with self._declare_lock:
            if topic in self._declared:
                return
            try:
                await self._ensure_stream(topic)
            except nats.errors.Error as exc:
                raise BrokerError(f"cannot declare topic {topic!r} on NATS: {exc}") from exc
            self._declared.add(topic)

    async def undeclare(self, topic: str) -> None:
        """Undo ``declare`` for a failed build: delete the stream if this broker created
        it (a stream that existed before is left alone)."""
        self._declared.discard(topic)
        if topic not in self._created:
            return
        self._created.discard(topic)
        try:
            await self._jetstream().delete_stream(self.stream_name(topic))
        except nats.errors.Error as exc:
            raise BrokerError(f"cannot delete the stream of topic {topic!r}: {exc}") from exc

    def _stream_config(self, topic: str) -> StreamConfig:
        o = self.options
        return StreamConfig(
            name=o.stream_name(topic),
            description=f"reventless topic {topic}",
            subjects=[o.subjects(topic)],
            retention=RetentionPolicy.LIMITS,
            discard=DiscardPolicy.OLD,
            storage=StorageType.FILE if o.storage == "file" else StorageType.MEMORY,
            num_replicas=o.replicas,
            duplicate_window=o.dedup_window,
            max_age=o.max_age or None,
        )

    async def _ensure_stream(self, topic: str) -> None:
        js = self._jetstream()
        want = self._stream_config(topic)
        name = str(want.name)
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_stream(want)
                log.info("created stream %s for topic %s", name, topic)
                self._created.add(topic)
                return
            except nats.js.errors.APIError as exc:
                if exc.err_code != _STREAM_NAME_IN_USE:  # else: created meanwhile
                    raise BrokerError(
                        f"cannot create stream {name} (subjects {want.subjects}) for topic "
                        f"{topic!r}: {exc}"
                    ) from exc
                info = await js.stream_info(name)
        have = list(info.config.subjects or [])
        ours = list(want.subjects or [])
        if all(s in have for s in ours):
            return
        try:
            await js.update_stream(replace(info.config, subjects=have + ours))
        except nats.js.errors.APIError as exc:
            raise BrokerError(
                f"stream {name} exists with subjects {have} and cannot take {ours} "
                f"(topic {topic!r}): {exc}; fix or delete the stream"
            ) from exc
        log.warning("stream %s had subjects %s: added %s", name, have, ours)

    async def _ensure_consumer(
        self, stream: str, durable: str, group: str, topic: str, part: int | None = None
    ) -> None:
        js = self._jetstream()
        o = self.options
        want = ConsumerConfig(
            name=durable,
            durable_name=durable,
            description=f"reventless group {group} on topic {topic}",
            filter_subject=o.subjects(topic, part),
            ack_policy=AckPolicy.EXPLICIT,
            # A new group starts at the live end: collectors catch up from the store.
            deliver_policy=DeliverPolicy.NEW,
            ack_wait=o.ack_wait,
            max_deliver=o.max_deliver,
            max_ack_pending=max(1000, 4 * o.batch),
        )
        try:
            info = await js.consumer_info(stream, durable)
        except nats.js.errors.NotFoundError:
            try:
                await js.add_consumer(stream, want)
                return
            except nats.js.errors.APIError as exc:
                if exc.err_code not in _CONSUMER_ALREADY_EXISTS:
                    raise BrokerError(
                        f"cannot create consumer {durable} on stream {stream}: {exc}"
                    ) from exc
                info = await js.consumer_info(stream, durable)
        have: ConsumerConfig = info.config
        if (have.filter_subject, have.max_deliver, have.ack_wait) == (
            want.filter_subject,
            want.max_deliver,
            want.ack_wait,
        ):
            return
        update = replace(
            have,
            filter_subject=want.filter_subject,
            max_deliver=want.max_deliver,
            ack_wait=want.ack_wait,
        )
        try:
            await js.add_consumer(stream, update)
        except nats.js.errors.APIError as exc:
            raise BrokerError(
                f"consumer {durable} on stream {stream} exists with other settings "
                f"(filter {have.filter_subject}, max_deliver {have.max_deliver}, ack_wait "
                f"{have.ack_wait}) and cannot be updated: {exc}; delete it to recreate it"
            ) from exc

    # -- publish ----------------------------------------------------------------------------

    async def publish(self, messages: Sequence[Message]) -> None:
        """Publish with ``Nats-Msg-Id`` = ``msg_id``, up to ``max_pending`` acks in flight;
        raise ``BrokerError`` unless the server stored (or deduplicated) every message."""
        if not messages:
            return
        js = self._jetstream()
        for topic in dict.fromkeys(m.topic for m in messages):
            await self.declare(topic)
        o = self.options
        limit = self._nc.max_payload if self._nc is not None else 1 << 20
        futures: list[asyncio.Future[PubAck]] = []
        try:
            for m in messages:
                headers = {k: v for k, v in m.headers.items() if k not in _RESERVED}
                headers[MSG_ID] = m.msg_id
                if m.key:
                    headers[KEY] = m.key
                if len(m.data) + sum(len(k) + len(v) + 4 for k, v in headers.items()) > limit:
                    # Cannot ever go through; subscribers fill the gap from the store.
                    self.oversized_dropped += 1
                    log.error(
                        "message %s of topic %s is %d bytes, over the server's max_payload "
                        "(%d): not published (collectors read that range from the store)",
                        m.msg_id,
                        m.topic,
                        len(m.data),
                        limit,
                    )
                    continue
                fut = await js.publish_async(
                    o.subject(m.topic, m.key),
                    m.data,
                    wait_stall=o.publish_timeout,
                    stream=o.stream_name(m.topic),
                    headers=headers,
                )
                futures.append(fut)
            async with asyncio.timeout(o.publish_timeout):
                acks = await asyncio.gather(*futures)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            for fut in futures:
                fut.cancel()  # frees its slot in the client's pending window
            if isinstance(exc, nats.js.errors.NoStreamResponseError):
                # No stream answered: one that is gone is declared again next time; one
                # with no leader yet (a cluster electing one after a node failed) is not,
                # as its stream info would only wait out the API timeout on every retry.
                for topic in dict.fromkeys(m.topic for m in messages):
                    if await self._stream_exists(topic) is False:
                        self._declared.discard(topic)
            elif isinstance(exc, nats.js.errors.APIError):
                self._declared.clear()  # the stream may be gone: declare again next time
            raise BrokerError(f"NATS publish failed: {exc!r}") from exc
        for ack in acks:
            if ack.duplicate:
                self.duplicates_dropped += 1
            else:
                self.published += 1

    # -- subscribe --------------------------------------------------------------------------

    async def subscribe(
        self,
        group: str,
        topics: Sequence[str],
        handler: Handler,
        *,
        partitions: Collection[int] | None = None,
    ) -> JetStreamSubscription:
        """Join ``group`` on ``topics``: one durable pull consumer per (group, topic),
        shared by this process's members of the group (split by ``crc32(key)``).

        With ``partitions`` (a member of a collector group), one consumer per subject
        partition those topic partitions map to, each filtering on its one subject, so
        the server sends the member only (nearly) its own partitions; what still arrives
        of other partitions (several map to one subject) is acked without delivery."""
        self._jetstream()
        async with self._subscribe_lock:
            return await self._subscribe(group, topics, handler, partitions)

    async def _subscribe(
        self,
        group: str,
        topics: Sequence[str],
        handler: Handler,
        partitions: Collection[int] | None,
    ) -> JetStreamSubscription:
        joined: list[tuple[Pump, Member]] = []
        try:
            subject_parts = self.options.subject_parts(partitions)
            for topic in dict.fromkeys(topics):
                for part in subject_parts:
                    pump = self._pumps.get((group, topic, part))
                    fresh = pump is None
                    if pump is None:
                        pump = Pump(self._session, group, topic, part)
                        await pump.setup()  # errors reach the caller (bad config, no server)
                        self._pumps[(group, topic, part)] = pump
                    member = Member(handler, None if partitions is None else frozenset(partitions))
                    pump.members.append(member)
                    joined.append((pump, member))
                    if fresh:
                        pump.start()
        except nats.errors.Error as exc:
            await JetStreamSubscription(joined).close()
            raise BrokerError(f"cannot subscribe {group!r} to {list(topics)}: {exc}") from exc
        except BaseException:
            await JetStreamSubscription(joined).close()
            raise
        return JetStreamSubscription(joined)

    async def _prepare(self, group: str, topic: str, part: int | None) -> JetStreamContext:
        """The ``PumpSession.prepare`` of this broker's pumps."""
        js = self._jetstream()
        await self.declare(topic)
        o = self.options
        await self._ensure_consumer(
            o.stream_name(topic), o.durable_name(group, part), group, topic, part
        )
        return js

    async def _drop_pump(self, pump: Pump) -> None:
        if self._pumps.get((pump.group, pump.topic, pump.part)) is pump:
            del self._pumps[(pump.group, pump.topic, pump.part)]
        await pump.stop()

    def _to_message(self, topic: str, raw: Msg) -> Message:
        headers = dict(raw.headers or {})
        msg_id = headers.get(MSG_ID, "")
        key = headers.get(KEY, "")
        for name in _RESERVED:
            headers.pop(name, None)
        return Message(topic=topic, data=raw.data, msg_id=msg_id, headers=headers, key=key)

    # -- existence probes -------------------------------------------------------------------

    async def _stream_exists(self, topic: str) -> bool | None:
        """Whether ``topic``'s stream exists, as the meta leader lists it (None: no answer).

        A clustered stream without a leader answers neither publishes nor its stream info,
        but is still listed."""
        o = self.options
        body = json.dumps({"subject": o.subjects(topic, 0)}).encode()
        names = await self._names("$JS.API.STREAM.NAMES", body, "streams")
        return None if names is None else o.stream_name(topic) in names

    async def _consumer_exists(self, group: str, topic: str, part: int | None) -> bool | None:
        """The ``PumpSession.exists`` of this broker's pumps: whether the durable consumer
        of (group, topic, part) exists, as the meta leader lists it (None: no answer)."""
        o = self.options
        names = await self._names(
            f"$JS.API.CONSUMER.NAMES.{o.stream_name(topic)}", b"", "consumers"
        )
        return None if names is None else o.durable_name(group, part) in names

    async def _names(self, subject: str, body: bytes, key: str) -> list[str] | None:
        """The names a JetStream API listing returns; ``[]`` if its stream is not found;
        None without an answer in ``_PROBE_TIMEOUT``, or if one page cannot tell."""
        nc = self._nc
        if nc is None or nc.is_closed:
            return None
        try:
            resp = json.loads((await nc.request(subject, body, timeout=_PROBE_TIMEOUT)).data)
        except Exception as exc:  # any failure of a probe is "no answer"
            log.debug("no answer from %s: %r", subject, exc)
            return None
        error = resp.get("error")
        if error:
            return [] if error.get("err_code") == _STREAM_NOT_FOUND else None
        names = [str(n) for n in resp.get(key) or []]
        return names if resp.get("total", 0) <= len(names) else None

    # -- introspection ----------------------------------------------------------------------

    async def stream_info(self, topic: str) -> StreamInfo:
        """The server's ``StreamInfo`` of ``topic`` (state: messages, bytes, sequences)."""
        try:
            return await self._jetstream().stream_info(self.stream_name(topic))
        except nats.errors.Error as exc:
            raise BrokerError(f"no stream info for topic {topic!r}: {exc}") from exc
