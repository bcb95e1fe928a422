"""reventless-nats: the NATS JetStream broker adapter (``nats://host:4222?...`` URLs).

Example::

    import reventless as rv

    app = rv.App(store="sqlite:///shop.db", broker="nats://127.0.0.1:4222?partitions=16")
"""

from __future__ import annotations

from .broker import JetStreamBroker, JetStreamSubscription
from .options import NatsOptions, token

__all__ = ["JetStreamBroker", "JetStreamSubscription", "NatsOptions", "token"]
