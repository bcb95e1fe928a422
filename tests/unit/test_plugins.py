"""Broker plugins: the installed distributions register their schemes in the
``reventless.brokers`` entry points, ``open_broker`` finds them there, an unknown scheme
names the installed ones and how to install more, and each plugin's broker declares its
typed capabilities (no I/O: nothing here connects)."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import reventless as rv
from reventless.broker import (
    BrokerCapabilities,
    BrokerPlugin,
    DeadLetterQueues,
    OrderAware,
    Undeclaring,
    capabilities_of,
    installed_schemes,
    open_broker,
    plugin_for,
)
from reventless.broker.memory import InMemoryBroker
from tests.services import require_package


def test_the_installed_entry_points_resolve_to_plugins_of_their_scheme() -> None:
    registered = {ep.name: ep for ep in entry_points(group="reventless.brokers")}
    assert {"memory", "nats", "nats+tls", "sns+sqs"} <= set(registered)
    assert {"memory", "nats", "nats+tls", "sns+sqs"} <= set(installed_schemes())
    for scheme, ep in registered.items():
        plugin = ep.load()
        assert isinstance(plugin, BrokerPlugin) and scheme in plugin.schemes
    assert registered["memory"].value == "reventless.broker.memory:PLUGIN"
    assert plugin_for("nats://h:4222") is plugin_for("nats+tls://h:4222")


def test_memory_is_a_plugin_like_the_adapters() -> None:
    broker = open_broker("memory://")
    assert type(broker) is InMemoryBroker
    assert isinstance(rv.App(store="sqlite://").broker, InMemoryBroker)
    assert plugin_for("memory://").synth is None


def test_an_unknown_scheme_names_the_installed_ones_and_a_hint() -> None:
    with pytest.raises(rv.BrokerError) as caught:
        open_broker("kafka://u:s3cret@h:9092")
    text = str(caught.value)
    assert "unknown broker URL scheme 'kafka'" in text and "s3cret" not in text
    for scheme in installed_schemes():
        assert scheme in text
    assert "reventless.brokers" in text  # where an adapter registers its schemes
    with pytest.raises(rv.BrokerError, match="unknown broker URL scheme ''"):
        open_broker("no-scheme-here")


def test_a_missing_adapter_is_named_by_its_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    from reventless.broker import plugin as plugin_module

    only_memory = {"memory": plugin_module._registered()["memory"]}
    monkeypatch.setattr(plugin_module, "_registered", lambda: only_memory)
    with pytest.raises(rv.BrokerError, match=r"installed: memory\); pip install reventless-nats"):
        open_broker("nats+tls://h:4222")
    with pytest.raises(rv.BrokerError, match="pip install reventless-aws"):
        open_broker("sns+sqs://us-east-1")


def test_memory_capabilities() -> None:
    broker = open_broker("memory://")
    assert capabilities_of(broker) == BrokerCapabilities()
    assert isinstance(broker, Undeclaring)
    assert not isinstance(broker, DeadLetterQueues | OrderAware)


def test_nats_plugin_capabilities() -> None:
    require_package("reventless_nats", "pip install -e adapters/nats")
    from reventless_nats import JetStreamBroker

    plugin = plugin_for("nats://127.0.0.1:4222")
    assert plugin.schemes == ("nats", "nats+tls")
    assert plugin.install_hint == "pip install reventless-nats"
    broker = plugin.factory("nats://127.0.0.1:4222?partitions=4")
    assert isinstance(broker, JetStreamBroker) and broker.options.partitions == 4
    # before connecting, the limit is the server default's (1 MiB) less the header room
    assert capabilities_of(broker) == BrokerCapabilities(max_message_bytes=(1 << 20) - 8192)
    assert isinstance(broker, Undeclaring)
    assert not isinstance(broker, DeadLetterQueues | OrderAware)
    assert plugin.synth is not None and plugin.synth.file == "jetstream.json"


def test_aws_plugin_capabilities() -> None:
    require_package("reventless_aws", "pip install -e adapters/aws")
    from reventless_aws import MAX_PAYLOAD_BYTES, SnsSqsBroker

    plugin = plugin_for("sns+sqs://us-east-1")
    assert plugin.schemes == ("sns+sqs",) and plugin.install_hint == "pip install reventless-aws"
    broker = open_broker("sns+sqs://us-east-1?prefix=t&fifo=false")
    assert isinstance(broker, SnsSqsBroker)
    assert capabilities_of(broker) == BrokerCapabilities(
        max_message_bytes=MAX_PAYLOAD_BYTES, filters_types=True
    )
    assert isinstance(broker, Undeclaring) and isinstance(broker, DeadLetterQueues)
    assert isinstance(broker, OrderAware) and not broker.delivers_in_order("g")  # fifo=false
    assert plugin.synth is not None and plugin.synth.file == "cloudformation.json"
