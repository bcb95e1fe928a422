"""Infrastructure derived from an App's specs: the channels (topics and the collectors that
read them), the SQL DDL of the stores, JetStream stream/consumer definitions and (with
``reventless-aws``) an AWS CloudFormation template. Pure: nothing here connects anywhere.

Example::

    from reventless.infra import synth

    synth(app, "infra/generated", aws_url="sns+sqs://eu-west-1?prefix=shop")

or ``reventless infra synth --app my.module:app --out infra/generated``.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.schema import CreateIndex, CreateTable

from .codec import TopicSchema
from .collect.component import ReadModel
from .collect.groups import group_name as lease_group
from .collect.where import compile_where, narrow
from .errors import SpecError
from .store import tables
from .store.database import table_name
from .store.ddl import KIND_TYPES, topic_table

if TYPE_CHECKING:
    from .app import App


@dataclass(frozen=True, slots=True)
class CollectorChannel:
    """A collector as the broker sees it: its consumer group, the topics it reads, and per
    topic the event types it handles and its ``where=`` predicate allows (``None``: every
    row, e.g. a schema-topic handler)."""

    group: str
    topics: dict[str, frozenset[str] | None]
    ordered: bool = True
    #: The topic partitions this channel carries, when it is one static member's share
    #: or one leased partition's consumer group (None: all of them).
    partitions: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Channels:
    """Topics (name -> partitions and event types) and collectors of an application."""

    topics: dict[str, tuple[int, frozenset[str]]] = field(default_factory=dict)
    collectors: list[CollectorChannel] = field(default_factory=list)

    def validate(self) -> None:
        """Every collector reads declared topics."""
        for c in self.collectors:
            for t in c.topics:
                if t not in self.topics:
                    raise SpecError(f"collector {c.group!r} reads undeclared topic {t!r}")


def channels_of(app: App) -> Channels:
    """The channels of ``app``'s declarations (no I/O)."""
    topics: dict[str, tuple[int, frozenset[str]]] = {}
    for name, t in app.topics.items():
        kind = t.definition.kind
        types = frozenset(t.definition.schema.event_types) if kind == "aggregate" else frozenset()
        topics[name] = (t.definition.partitions, types)
    collectors = []
    for name, comp in app._components.items():
        dispatch = app._dispatch(comp)
        # a where= predicate that restricts the event type narrows the channel further
        filters = compile_where(comp, {t: app.topics[t].definition for t in dispatch})
        reads: dict[str, frozenset[str] | None] = {
            t: narrow(None if "*" in handlers else frozenset(handlers), filters, t)
            for t, handlers in dispatch.items()
        }
        collectors.extend(_member_channels(app, name, reads, comp.ordered))
    out = Channels(topics, collectors)
    out.validate()
    return out


def _member_channels(
    app: App, name: str, reads: dict[str, frozenset[str] | None], ordered: bool
) -> list[CollectorChannel]:
    """The channels component ``name`` runs on: one; in a static group of several members
    one per member with its share of the partitions; in a leased group one per topic
    partition (whichever member holds its lease subscribes)."""
    o = app.options.collector
    sizes = {t: app.topics[t].definition.partitions for t in reads}
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
            o.static_group(name, m),
            reads,
            ordered,
            frozenset(p for n in sizes.values() for p in o.static_share(n, m)),
        )
        for m in range(o.members)
    ]


def sql_ddl(app: App, dialect: str = "sqlite") -> str:
    """The DDL of ``app``'s store for ``dialect`` (``sqlite`` or ``postgresql``): system
    tables, one table per topic, one per read model."""
    eng = sa.create_mock_engine(f"{dialect}://", lambda *a, **k: None)
    d = eng.dialect
    parts = [f"-- reventless store DDL ({dialect}), derived from the App's declarations"]
    all_tables: list[sa.Table] = list(tables.metadata.sorted_tables)
    all_tables += [topic_table(t.definition) for t in app.topics.values()]
    for comp in app._components.values():
        if isinstance(comp, ReadModel):
            all_tables.append(_read_model_table(comp))
    for table in all_tables:
        parts.append(str(CreateTable(table, if_not_exists=True).compile(dialect=d)).strip() + ";")
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            parts.append(
                str(CreateIndex(index, if_not_exists=True).compile(dialect=d)).strip() + ";"
            )
    return "\n\n".join(parts) + "\n"


def _read_model_table(model: ReadModel[Any]) -> sa.Table:
    schema = TopicSchema.from_model(model.name, model.row)
    return sa.Table(
        table_name("rm_", model.name),
        sa.MetaData(),
        *(
            sa.Column(
                c.name,
                KIND_TYPES[c.sql_kind](),
                primary_key=c.name == model.key,
                nullable=c.nullable or c.name == model.key,
                autoincrement=False,
            )
            for c in schema.columns
        ),
    )


def jetstream(channels: Channels, nats_url: str = "nats://127.0.0.1:4222") -> dict[str, Any]:
    """JetStream stream and consumer definitions (JetStream API JSON) as the NATS adapter
    declares them; needs ``reventless-nats`` for the name mapping."""
    try:
        options_mod = importlib.import_module("reventless_nats.options")
    except ImportError as exc:
        raise SpecError("JetStream definitions need reventless-nats installed") from exc
    o = options_mod.NatsOptions.from_url(nats_url)
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


def cloudformation(channels: Channels, aws_url: str = "sns+sqs://us-east-1") -> dict[str, Any]:
    """The AWS CloudFormation template of ``channels``; needs ``reventless-aws``."""
    try:
        cfn = importlib.import_module("reventless_aws.cloudformation")
    except ImportError as exc:
        raise SpecError("the CloudFormation template needs reventless-aws installed") from exc
    template: dict[str, Any] = cfn.template(channels, aws_url)
    return template


def synth(
    app: App,
    out: str | Path,
    *,
    aws_url: str | None = "sns+sqs://us-east-1",
    nats_url: str | None = "nats://127.0.0.1:4222",
    dialects: tuple[str, ...] = ("sqlite", "postgresql"),
) -> list[Path]:
    """Write ``cloudformation.json``, ``jetstream.json`` and ``schema.<dialect>.sql`` for
    ``app`` into ``out``; returns the files written (an adapter that is not installed is
    skipped when its URL is None)."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    channels = channels_of(app)
    written = []
    if aws_url is not None:
        written.append(_write(path / "cloudformation.json", cloudformation(channels, aws_url)))
    if nats_url is not None:
        written.append(_write(path / "jetstream.json", jetstream(channels, nats_url)))
    for d in dialects:
        target = path / f"schema.{d}.sql"
        target.write_text(sql_ddl(app, d))
        written.append(target)
    return written


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path
