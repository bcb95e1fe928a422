"""The Broker port (adapters move bytes + headers), its typed capabilities, the channels
a broker carries, and the URL -> adapter plugins (entry-point group ``reventless.brokers``).

What adapters import from the core lives here: ``Message``, ``Handler``, ``Broker``,
``Subscription``, the capability Protocols, ``BrokerPlugin`` and ``Synthesis``.

Example::

    broker = open_broker("memory://")
"""

from __future__ import annotations

from .capabilities import (
    BrokerCapabilities,
    DeadLetterQueues,
    DeclaresCapabilities,
    OrderAware,
    SubscriberAware,
    Undeclaring,
    capabilities_of,
)
from .channels import Channels, CollectorChannel
from .plugin import BrokerPlugin, Synthesis, installed_schemes, open_broker, plugin_for
from .port import Broker, Handler, Message, Subscription, wanted

__all__ = [
    "Broker",
    "BrokerCapabilities",
    "BrokerPlugin",
    "Channels",
    "CollectorChannel",
    "DeadLetterQueues",
    "DeclaresCapabilities",
    "Handler",
    "Message",
    "OrderAware",
    "SubscriberAware",
    "Subscription",
    "Synthesis",
    "Undeclaring",
    "capabilities_of",
    "installed_schemes",
    "open_broker",
    "plugin_for",
    "wanted",
]
