"""``Topology``: what an application's declarations imply for its collectors, computed once
and without I/O: the topics, each component's dispatch (topic -> event type -> handler, in
the order the live collector catches topics up in), its ``where=`` filters and the event
types it needs per topic, its broker consumer groups (static members' or leased
partitions'), and the ``Channels`` infrastructure synthesis writes.

It promises the same answers ``App.start``, ``reventless infra synth`` and the Spark
rebuild need, from public declarations only: building one reads the App's ``topics``,
``components``, ``log_for`` and ``options.collector`` and never connects anywhere.

Example::

    topology = Topology.of(app)
    topology.dispatch("directory")   # {"Customer": {"Registered": HandlerSpec(...)}}
    topology.groups("directory")     # ["directory"] (or one per leased partition)
    topology.channels()              # what infra synth turns into SNS/SQS or JetStream
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .broker.channels import Channels, CollectorChannel
from .collect.groups import group_name as lease_group
from .collect.options import CollectorOptions
from .collect.where import compile_where, narrow, wanted_types
from .errors import SpecError
from .spec import Event as SpecEvent
from .topicdef import TopicDef

if TYPE_CHECKING:
    from .app import App
    from .collect.component import Component, HandlerSpec
    from .collect.where import TopicFilter
    from .spec import Event

#: Per topic a component reads, its handlers by event type (``"*"``: a schema-topic
#: handler that takes every row).
Dispatch = dict[str, dict[str, "HandlerSpec"]]


def static_group(component: str, members: int, member: int) -> str:
    """The broker consumer group of ``component``'s static member ``member`` of
    ``members`` (``CollectorOptions.static_group``)."""
    return CollectorOptions(members=members, member=member).static_group(component)


def static_share(partitions: int, members: int, member: int) -> list[int]:
    """The partitions of a topic that static member ``member`` of ``members`` owns
    (``CollectorOptions.static_share``)."""
    return CollectorOptions(members=members, member=member).static_share(partitions)


def dispatch_of(
    component: Component, owners: Mapping[type[Event], str], topics: Collection[str]
) -> Dispatch:
    """``component``'s handlers per topic and event type: an event class goes to the topic
    of the EventLog that has it (``owners``), a topic handler to its (declared) topic.
    Raises ``SpecError`` for a handler no topic of the App serves, or no handler at all."""
    out: Dispatch = {}
    for ev, h in component.handlers.items():
        topic = owners.get(ev)
        if topic is None:
            raise SpecError(
                f"{component.name}: handles {ev.__name__}, but no EventLog of this App has it"
            )
        out.setdefault(topic, {})[ev.event_type] = h
    for topic, h in component.topic_handlers.items():
        if topic not in topics:
            raise SpecError(f"{component.name}: handles unknown topic {topic!r}")
        out.setdefault(topic, {})["*"] = h
    if not out:
        raise SpecError(f"{component.name}: has no handlers")
    return out


@dataclass(frozen=True, slots=True, eq=False)
class Topology:
    """The derived shape of an App's collectors; build it with ``Topology.of(app)`` or
    ``Topology.build(...)``. Read-only: every method answers from these fields."""

    #: Declared topics by name, in declaration order.
    topics: Mapping[str, TopicDef]
    #: Collected components by name, in the order they were collected.
    components: Mapping[str, Component]
    #: How collectors run (static member or leased group: the consumer group names).
    options: CollectorOptions
    #: Event class -> the topic of the EventLog that has it.
    owners: Mapping[type[Event], str]
    #: Component name -> its dispatch (see ``dispatch``).
    dispatches: Mapping[str, Dispatch]
    #: Component name -> its ``where=`` compiled per topic it reads (empty without one).
    predicates: Mapping[str, Mapping[str, TopicFilter]]

    @classmethod
    def build(
        cls,
        topics: Mapping[str, TopicDef],
        logs: Mapping[str, Sequence[type[Event]]],
        components: Mapping[str, Component],
        options: CollectorOptions,
    ) -> Topology:
        """The topology of declared ``topics``, the event classes of each EventLog's topic
        (``logs``, in declaration order), ``components`` and the collector ``options``.

        Raises ``SpecError`` (a handler no topic serves) or ``PredicateError`` (a bad
        ``where=``), every dispatch checked before any predicate, as ``App.start`` does."""
        owners: dict[type[Event], str] = {}
        for name, events in logs.items():
            for ev in events:
                owners[ev] = name
        dispatches = {n: dispatch_of(c, owners, topics) for n, c in components.items()}
        return cls(
            dict(topics),
            dict(components),
            options,
            owners,
            dispatches,
            _compile(components, dispatches, topics),
        )

    @classmethod
    def of(cls, app: App) -> Topology:
        """The topology of ``app``'s declarations so far (no I/O)."""
        topics = app.topics
        logs = {
            name: app.log_for(name).spec.event_classes
            if t.definition.kind == "aggregate"
            else _events_of(t.definition)
            for name, t in topics.items()
            if t.definition.kind in ("aggregate", "dcb")
        }
        return cls.build(
            {name: t.definition for name, t in topics.items()},
            logs,
            app.components,
            app.options.collector,
        )

    # -- per component ----------------------------------------------------------------------

    def dispatch(self, component: str) -> Dispatch:
        """Topic -> event type -> handler of collected ``component``, in the order its
        collector catches the topics up (a fresh copy the caller may keep)."""
        return {t: dict(h) for t, h in self.dispatches[component].items()}

    def dispatch_of(self, component: Component) -> Dispatch:
        """The dispatch ``component`` would have in this App, collected or not (the Spark
        rebuild plans a model this way)."""
        return dispatch_of(component, self.owners, self.topics)

    def filters(self, component: str) -> dict[str, TopicFilter]:
        """``component``'s ``where=`` compiled per topic it reads (empty without one)."""
        return dict(self.predicates[component])

    def reads(self, component: str) -> dict[str, frozenset[str] | None]:
        """Per topic ``component`` reads, the event types it needs: those it handles,
        narrowed by its ``where=`` (None: every row, e.g. a schema-topic handler)."""
        filters = self.predicates[component]
        return {
            t: narrow(None if "*" in handlers else frozenset(handlers), filters, t)
            for t, handlers in self.dispatches[component].items()
        }

    def wanted_types(self, component: str) -> dict[str, frozenset[str]]:
        """Per topic, the event types ``component`` needs when that is fewer than all of
        the topic's types; topics it needs whole (or schema topics) are left out. A broker
        that filters by type (SNS filter policies) subscribes with these."""
        return wanted_types(self.topics, self.dispatches[component], self.predicates[component])

    def group(self, component: str) -> str:
        """The broker consumer group ``component`` subscribes with in a static group, as
        this process's member."""
        o = self.options
        return static_group(component, o.members, o.member)

    def groups(self, component: str) -> list[str]:
        """Every broker consumer group ``component`` may subscribe with in this process:
        one, or in a leased group one per topic partition (whichever member owns it)."""
        if self.options.group != "leased":
            return [self.group(component)]
        return [
            lease_group(component, t, p)
            for t in self.dispatches[component]
            for p in range(self.topics[t].partitions)
        ]

    # -- the whole application --------------------------------------------------------------

    def channels(self) -> Channels:
        """Topics and collector channels of the application, every group member's (what
        infrastructure synthesis declares); raises ``SpecError`` if one is inconsistent."""
        topics: dict[str, tuple[int, frozenset[str]]] = {}
        for name, d in self.topics.items():
            typed = d.kind in ("aggregate", "dcb")
            types = frozenset(d.schema.event_types) if typed else frozenset()
            topics[name] = (d.partitions, types)
        collectors: list[CollectorChannel] = []
        for name, comp in self.components.items():
            collectors.extend(self._member_channels(name, self.reads(name), comp.ordered))
        out = Channels(topics, collectors)
        out.validate()
        return out

    def _member_channels(
        self, name: str, reads: dict[str, frozenset[str] | None], ordered: bool
    ) -> list[CollectorChannel]:
        """The channels component ``name`` runs on: one; in a static group of several
        members one per member with its share of the partitions; in a leased group one per
        topic partition (whichever member holds its lease subscribes)."""
        o = self.options
        sizes = {t: self.topics[t].partitions for t in reads}
        if o.group == "leased":
            return [
                CollectorChannel(lease_group(name, t, p), {t: reads[t]}, ordered, frozenset({p}))
                for t in reads
                for p in range(sizes[t])
            ]
        if o.members == 1:
            return [CollectorChannel(name, reads, ordered)]
        return [
            CollectorChannel(
                static_group(name, o.members, m),
                reads,
                ordered,
                frozenset(p for n in sizes.values() for p in static_share(n, o.members, m)),
            )
            for m in range(o.members)
        ]


def _events_of(topic: TopicDef) -> tuple[type[Event], ...]:
    """The event classes of a DCB log's topic (its schema's models)."""
    return tuple(m for m in topic.schema.event_types.values() if issubclass(m, SpecEvent))


def _compile(
    components: Mapping[str, Component],
    dispatches: Mapping[str, Dispatch],
    topics: Mapping[str, TopicDef],
) -> dict[str, dict[str, TopicFilter]]:
    """Every component's ``where=`` compiled per topic it reads (``PredicateError``)."""
    if all(c.where is None for c in components.values()):
        return {n: {} for n in components}
    return {
        n: compile_where(c, {t: topics[t] for t in dispatches[n]}) for n, c in components.items()
    }


__all__ = [
    "Dispatch",
    "Topology",
    "dispatch_of",
    "lease_group",
    "static_group",
    "static_share",
]
