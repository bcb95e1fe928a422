"""JetStream stream and consumer definitions (JetStream API JSON) of an application's
channels, named as ``JetStreamBroker`` names them for the same URL. Pure: no server.

Example::

    jetstream(Topology.of(app).channels(), "nats://127.0.0.1:4222?partitions=16")
"""

from __future__ import annotations

from typing import Any

from reventless.broker import Channels

from .options import NatsOptions


def jetstream(channels: Channels, url: str = "nats://127.0.0.1:4222") -> dict[str, Any]:
    """The streams (one per topic) and durable consumers (one per collector channel, topic
    and subject partition) of ``channels`` for broker ``url``."""
    o = NatsOptions.from_url(url)
    streams = []
    for topic in channels.topics:
        streams.append(
            {
                "name": o.stream_name(topic),
                "description": f"reventless topic {topic}",
                "subjects": [o.subjects(topic)],
                "retention": "limits",
                "discard": "old",
                "storage": o.storage,
                "num_replicas": o.replicas,
                "duplicate_window": int(o.dedup_window * 1e9),
                "max_age": int(o.max_age * 1e9),
            }
        )
    consumers = []
    for c, topic, part in (
        (ch, t, part)
        for ch in channels.collectors
        for t in ch.topics
        for part in o.subject_parts(ch.partitions)
    ):
        consumers.append(
            {
                "stream_name": o.stream_name(topic),
                "config": {
                    "name": o.durable_name(c.group, part),
                    "durable_name": o.durable_name(c.group, part),
                    "description": f"reventless group {c.group} on topic {topic}",
                    "filter_subject": o.subjects(topic, part),
                    "ack_policy": "explicit",
                    "deliver_policy": "new",
                    "ack_wait": int(o.ack_wait * 1e9),
                    "max_deliver": o.max_deliver,
                },
            }
        )
    return {"streams": streams, "consumers": consumers}
