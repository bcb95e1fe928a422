"""The instruments reventless records (OpenTelemetry metrics API).

Names and units follow the OpenTelemetry semantic conventions where one exists
(``db.client.operation.duration``, ``messaging.client.sent.messages``,
``messaging.client.consumed.messages``, ``messaging.process.duration``); the rest are
``reventless.*``. Durations are in seconds; counts use ``{event}``-style units.
Lag and backlog are observed (gauges read when a reader collects), so the hot path
records nothing for them.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

#: The instrumentation scope of every instrument (and span).
SCOPE = "reventless"
_SECONDS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
_SIZES = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000]
_LATENESS = [0.001, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600]


class Lagging(Protocol):
    """What the lag gauge reads of a running collector."""

    name: str
    checkpoints: dict[tuple[str, int], int]

    @property
    def store(self) -> Any: ...


class Backlogged(Protocol):
    """What the backlog gauge reads of a relay."""

    def backlog(self) -> Mapping[str, int]:
        """Committed and not yet published events, per topic."""
        ...


#: Per store, the newest offset this process knows of per (topic, partition): from what
#: the relay publishes and what collectors receive or read (their lag is measured to it).
HEADS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], int]] = weakref.WeakKeyDictionary()


def saw(store: Any, topic: str, partition: int, offset: int) -> None:
    """Note that ``offset`` of a topic partition of ``store`` exists (once per batch or
    message)."""
    heads = HEADS.get(store)
    if heads is None:
        heads = HEADS[store] = {}
    key = (topic, partition)
    if heads.get(key, -1) < offset:
        heads[key] = offset


class Instruments:
    """Every instrument, created once per meter provider."""

    def __init__(self, provider: MeterProvider) -> None:
        self.provider = provider
        m = provider.get_meter(SCOPE)
        h = m.create_histogram
        self.append_duration = h(
            "db.client.operation.duration",
            unit="s",
            description="Duration of appends to the event store (one transaction)",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        #: Events appended per topic: a tally (a dict update per append, cheaper than a
        #: counter's measurement) that the counter reads when a reader collects.
        self.appended: dict[str, int] = {}
        m.create_observable_counter(
            "reventless.events.appended",
            callbacks=[self._appended],
            unit="{event}",
            description="Events appended",
        )
        self.retries = m.create_counter(
            "reventless.command.retries",
            unit="{retry}",
            description="Commands retried after a concurrency clash",
        )
        self.sent = m.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Messages the relay published to the broker",
        )
        self.publish_duration = h(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of the relay's publish calls",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self.consumed = m.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Broker messages delivered to collectors",
        )
        self.process_duration = h(
            "messaging.process.duration",
            unit="s",
            description="Duration of a collector batch (handlers and its commit)",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self.batch_size = h(
            "reventless.collector.batch.size",
            unit="{event}",
            description="Events per collector batch",
            explicit_bucket_boundaries_advisory=_SIZES,
        )
        self.processed = m.create_counter(
            "reventless.collector.events", unit="{event}", description="Events collectors handled"
        )
        self.dead_letters = m.create_counter(
            "reventless.collector.dead_letters",
            unit="{event}",
            description="Events a collector dead-lettered",
        )
        self.redrives = m.create_counter(
            "reventless.collector.redrives",
            unit="{event}",
            description="Dead letters redriven (outcome: resolved or failed)",
        )
        self.lateness = h(
            "reventless.schedule.lateness",
            unit="s",
            description="How late scheduled commands fired after their due time",
            explicit_bucket_boundaries_advisory=_LATENESS,
        )
        self.fired = m.create_counter(
            "reventless.schedule.fired", unit="{command}", description="Scheduled commands fired"
        )
        self.streams = m.create_up_down_counter(
            "reventless.gateway.streams", unit="{stream}", description="Open gateway SSE streams"
        )
        self.frames = m.create_counter(
            "reventless.gateway.frames", unit="{frame}", description="SSE frames sent"
        )
        self.rebuild_duration = h(
            "reventless.rebuild.duration",
            unit="s",
            description="Duration of the stages of Spark rebuilds",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self.relays: weakref.WeakSet[Any] = weakref.WeakSet()
        self.collectors: weakref.WeakSet[Any] = weakref.WeakSet()
        m.create_observable_gauge(
            "reventless.relay.backlog",
            callbacks=[self._backlog],
            unit="{event}",
            description="Events committed and not yet published, per topic",
        )
        m.create_observable_gauge(
            "reventless.collector.lag",
            callbacks=[self._lag],
            unit="{event}",
            description="Newest known offset minus the checkpoint, per collector partition",
        )

    def tally_appended(self, topic: str, events: int) -> None:
        """Count ``events`` appended to ``topic``."""
        self.appended[topic] = self.appended.get(topic, 0) + events

    def _appended(self, _: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        for topic, n in list(self.appended.items()):
            yield Observation(n, {"db.collection.name": topic})

    def _backlog(self, _: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        for relay in list(self.relays):
            for topic, n in relay.backlog().items():
                yield Observation(n, {"messaging.destination.name": topic})

    def _lag(self, _: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        for c in list(self.collectors):
            heads = HEADS.get(c.store, {})
            for (topic, part), cp in list(c.checkpoints.items()):
                yield Observation(
                    max(0, heads.get((topic, part), cp) - cp),
                    {
                        "messaging.consumer.group.name": c.name,
                        "messaging.destination.name": topic,
                        "messaging.destination.partition.id": str(part),
                    },
                )


__all__ = ["HEADS", "Backlogged", "Instruments", "Lagging", "saw"]
