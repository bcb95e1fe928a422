"""Broker adapters as plugins: a distribution registers a ``BrokerPlugin`` per URL scheme in
the ``reventless.brokers`` entry-point group of its ``pyproject.toml``, and ``open_broker``
finds it there. The core names no adapter package: a plugin's module is imported only
when a URL of its scheme is opened (or its infrastructure synthesised).

Example (an adapter's ``pyproject.toml``)::

    [project.entry-points."reventless.brokers"]
    "kafka" = "my_kafka_adapter.plugin:PLUGIN"

and in the adapter::

    PLUGIN = BrokerPlugin(("kafka",), KafkaBroker.from_url, "pip install my-kafka-adapter")
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ..errors import BrokerError
from ..urls import redact_url
from .channels import Channels
from .port import Broker

log = logging.getLogger("reventless.broker")

#: The entry-point group adapters register their schemes in (name: the URL scheme).
GROUP = "reventless.brokers"

#: Install hints of the schemes of the project's own adapters, for when they are missing
#: (distribution names only: the core imports no adapter).
_HINTS = {
    "nats": "pip install reventless-nats",
    "nats+tls": "pip install reventless-nats",
    "sns+sqs": "pip install reventless-aws",
}


@dataclass(frozen=True, slots=True)
class Synthesis:
    """What ``reventless infra synth`` writes for a broker: ``render(channels, url)`` (a
    JSON-ready document with the names the adapter uses for ``url``) into ``file``."""

    file: str
    render: Callable[[Channels, str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class BrokerPlugin:
    """A broker adapter: the URL ``schemes`` it serves, the ``factory`` that builds a broker
    from such a URL (no I/O: the App connects it), the ``install_hint`` of its
    distribution, and optionally the infrastructure it ``synth``-esises."""

    schemes: tuple[str, ...]
    factory: Callable[[str], Broker]
    install_hint: str = ""
    synth: Synthesis | None = None


@functools.cache
def _registered() -> dict[str, EntryPoint]:
    """Scheme -> entry point, read once per process from the installed distributions."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found:
            log.warning("broker scheme %r is registered twice; using %s", ep.name, found[ep.name])
            continue
        found[ep.name] = ep
    return found


def installed_schemes() -> tuple[str, ...]:
    """The URL schemes of the installed broker plugins, sorted."""
    return tuple(sorted(_registered()))


def scheme_of(url: str) -> str:
    """The scheme of a broker URL (``""`` if it has none)."""
    return url.split("://", 1)[0] if "://" in url else ""


def plugin_for(url: str) -> BrokerPlugin:
    """The plugin serving ``url``'s scheme; ``BrokerError`` naming the installed schemes
    and how to install the missing adapter when there is none (or it cannot load)."""
    scheme = scheme_of(url)
    ep = _registered().get(scheme)
    if ep is None:
        hint = _HINTS.get(scheme) or (
            f"install the adapter that registers it in the {GROUP!r} entry points"
        )
        raise BrokerError(
            f"unknown broker URL scheme {scheme!r} in {redact_url(url)!r} (installed: "
            f"{', '.join(installed_schemes()) or 'none'}); {hint}"
        )
    try:
        plugin = ep.load()
    except ImportError as exc:
        raise BrokerError(
            f"broker {scheme!r} needs an extra package: {_HINTS.get(scheme, ep.value)}"
        ) from exc
    if not isinstance(plugin, BrokerPlugin) or scheme not in plugin.schemes:
        raise BrokerError(
            f"entry point {ep.value!r} of broker scheme {scheme!r} is not a BrokerPlugin "
            "serving that scheme"
        )
    return plugin


def open_broker(url: str) -> Broker:
    """Build the broker adapter for ``url`` (``memory://``, ``nats://...``, ``sns+sqs://...``
    or any installed plugin's scheme)."""
    return plugin_for(url).factory(url)


__all__ = [
    "GROUP",
    "BrokerPlugin",
    "Synthesis",
    "installed_schemes",
    "open_broker",
    "plugin_for",
    "scheme_of",
]
