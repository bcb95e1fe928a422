"""The ``nats://`` and ``nats+tls://`` broker plugin (entry points in the
``reventless.brokers`` group of this distribution's ``pyproject.toml``): the factory of
``JetStreamBroker`` and the JetStream definitions ``reventless infra synth`` writes.

Example::

    broker = PLUGIN.factory("nats://127.0.0.1:4222?partitions=16")
"""

from __future__ import annotations

from reventless.broker import BrokerPlugin, Synthesis

from .broker import JetStreamBroker
from .synth import jetstream

PLUGIN = BrokerPlugin(
    schemes=("nats", "nats+tls"),
    factory=JetStreamBroker.from_url,
    install_hint="pip install reventless-nats",
    synth=Synthesis("jetstream.json", jetstream),
)

__all__ = ["PLUGIN"]
