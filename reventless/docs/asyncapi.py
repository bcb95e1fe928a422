"""The AsyncAPI 3.0 document of an App: what its brokers carry, from its declarations.

Per broker URL the document has servers (``nats``; ``sns`` and ``sqs`` for ``sns+sqs``;
``memory``, a reventless-specific protocol name for the in-process broker), and channels
named as the broker adapter names them for that URL (the same names ``reventless infra
synth`` deploys: a JetStream subject per topic partition, an SNS topic per topic and an
SQS queue per collector group). The App's relay sends every topic; each collected
component (read model, mapper, side effect) receives the topics it handles, once per
consumer group. A message is one partition's batch of events, encoded as an Arrow IPC
stream; its payload schema is the array of those rows, each row the metadata columns
plus the fields of its event type (the JSON Schema pydantic derives from the event
model). Message headers are the ones the adapter sets. Pure: nothing connects anywhere.

Example::

    doc = document(app, brokers=["nats://127.0.0.1:4222", "sns+sqs://eu-west-1?prefix=shop"])
    Path("asyncapi.json").write_text(json.dumps(doc, indent=2))

or ``reventless docs asyncapi --app my.module:app --out asyncapi.json``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from ..broker import Channels, installed_schemes, plugin_for
from ..broker.plugin import scheme_of
from ..errors import BrokerError, SpecError
from ..synth import synthesis
from .schemas import TopicSchemas, schema_key

if TYPE_CHECKING:
    from ..app import App

ASYNCAPI_VERSION = "3.0.0"
#: The content type of a broker message's payload: an Arrow IPC stream of event rows.
ARROW_STREAM = "application/vnd.apache.arrow.stream"

#: Headers the relay puts on every message (``reventless.relay.message_for``).
RELAY_HEADERS: dict[str, Any] = {
    "rv-first": {"type": "string", "description": "Offset of the first event in the message."},
    "rv-last": {"type": "string", "description": "Offset of the last event in the message."},
    "rv-count": {"type": "string", "description": "Number of events in the message."},
    "rv-prev": {
        "type": "string",
        "description": "Offset of the partition's previous event (0: none): a consumer "
        "tells a gap from a duplicate.",
    },
    "rv-types": {
        "type": "string",
        "description": "The event types in the message, comma separated.",
    },
}
#: W3C trace context of the publish (with the ``otel`` extra and tracing on).
TRACE_HEADERS: dict[str, Any] = {
    "traceparent": {
        "type": "string",
        "description": "W3C traceparent of the relay's publish span (when tracing is on).",
    },
    "tracestate": {"type": "string", "description": "W3C tracestate (when there is one)."},
}
_RELAY_REQUIRED = ["rv-first", "rv-last", "rv-count", "rv-prev"]

#: Header schemas per broker family (the names the adapters use).
HEADERS: dict[str, dict[str, Any]] = {
    "memory": {
        "type": "object",
        "description": "The relay's headers, handed over in process.",
        "properties": {**RELAY_HEADERS, **TRACE_HEADERS},
        "required": _RELAY_REQUIRED,
    },
    "nats": {
        "type": "object",
        "description": "NATS message headers.",
        "properties": {
            "Nats-Msg-Id": {
                "type": "string",
                "description": "<topic>:<partition>:<first>-<last>; the server drops "
                "duplicate publishes within the stream's duplicate window.",
            },
            "Rv-Key": {"type": "string", "description": "The topic partition (message key)."},
            **RELAY_HEADERS,
            **TRACE_HEADERS,
        },
        "required": ["Nats-Msg-Id", *_RELAY_REQUIRED],
    },
    "aws": {
        "type": "object",
        "description": "SNS message attributes, delivered raw to SQS (the body is the "
        "payload in base64).",
        "properties": {
            "rv-topic": {"type": "string", "description": "The reventless topic."},
            "rv-id": {
                "type": "string",
                "description": "<topic>:<partition>:<first>-<last> (the FIFO deduplication id).",
            },
            "rv-key": {"type": "string", "description": "The topic partition (message key)."},
            "rv-types": {
                "type": "array",
                "items": {"type": "string"},
                "description": "String.Array attribute: the event types in the message "
                "(subscription filter policies match it).",
            },
            "rv-headers": {
                "type": "string",
                "contentMediaType": "application/json",
                "description": "The relay's headers (rv-first, rv-last, rv-count, rv-prev, "
                "rv-types) as a JSON object.",
            },
            **TRACE_HEADERS,
        },
        "required": ["rv-topic", "rv-id"],
    },
}


@dataclass(frozen=True, slots=True)
class _Names:
    """How one broker URL names the App's channels."""

    family: str  # memory | nats | aws
    topics: dict[str, str]  # topic -> address (subject pattern, SNS topic)
    groups: dict[tuple[str, str], str]  # (group, topic) -> consumer (durable, queue)
    queues: dict[str, str]  # group -> SQS queue name (aws only)


def document(
    app: App,
    *,
    brokers: Sequence[str] | None = None,
    title: str | None = None,
    version: str = "1.0.0",
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document (a JSON-ready dict) of ``app``'s topics, channels,
    messages and operations on each broker URL of ``brokers`` (default: the App's own
    broker's scheme with its default options; names depend on a URL's options such as
    ``prefix`` and ``partitions``, so pass the deployed URL). ``SpecError`` for a URL no
    installed broker plugin serves. Credentials in a URL never reach the document."""
    urls = list(brokers) if brokers else [_default_url(app)]
    topology = app.topology()
    channels = topology.channels()
    schemas = TopicSchemas()
    topics = {name: t.definition for name, t in app.topics.items()}
    rows = {name: schemas.add(d) for name, d in topics.items()}
    doc: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": title or f"{app.service or 'reventless'} events",
            "version": version,
            "description": "Events of a reventless application, as its brokers carry them "
            "(generated from the App's declarations by reventless).",
        },
        "defaultContentType": ARROW_STREAM,
        "servers": {},
        "channels": {},
        "operations": {},
        "components": {"schemas": schemas.schemas, "messages": {}},
    }
    components = doc["components"]
    for key, row in rows.items():
        components["schemas"][schema_key(key, "Batch")] = {
            "type": "array",
            "title": f"{key} batch",
            "description": f"The rows of one Arrow IPC stream of topic {key}: events of one "
            f"partition in offset order (compression: {topics[key].compression}).",
            "items": row,
        }
    taken: set[str] = set()
    for url in urls:
        names = _names(url, channels)
        servers = _servers(url, names.family, taken)
        doc["servers"].update(servers)
        family = names.family
        components["schemas"].setdefault(f"{family.capitalize()}Headers", HEADERS[family])
        for topic in topics:
            mkey = schema_key(family, topic)
            components["messages"].setdefault(mkey, _message(family, topic, topics[topic].kind))
        _channels(doc, names, channels, list(servers), app)
    return doc


def _default_url(app: App) -> str:
    """``<scheme>://`` of the installed plugin that builds brokers of ``app.broker``'s type."""
    for scheme in installed_schemes():
        try:
            factory = plugin_for(f"{scheme}://").factory
        except BrokerError:
            continue
        owner = getattr(factory, "__self__", None)  # a classmethod factory names its class
        if isinstance(owner, type) and isinstance(app.broker, owner):
            return f"{scheme}://"
    raise SpecError(
        f"cannot tell the URL of the App's broker {type(app.broker).__name__}: pass brokers=[URL]"
    )


def _names(url: str, channels: Channels) -> _Names:
    """The adapter's names for ``channels`` on ``url``, read from the infrastructure its
    plugin synthesises (so they are the ones the adapter uses)."""
    scheme = scheme_of(url)
    if scheme == "memory":
        plugin_for(url)
        return _Names(
            "memory",
            {t: t for t in channels.topics},
            {(c.group, t): c.group for c in channels.collectors for t in c.topics},
            {},
        )
    hook = synthesis(url)
    infra = hook.render(channels, url)
    if "streams" in infra:  # JetStream definitions
        topics = {
            t: s["subjects"][0].replace(">", "{partition}")
            for t, s in zip(channels.topics, infra["streams"], strict=True)
        }
        durables: dict[str, list[str]] = {}
        for cons in infra["consumers"]:  # one per group, topic and subject partition
            conf = cons["config"]
            durables.setdefault(conf["description"], []).append(conf["durable_name"])
        groups = {
            (c.group, t): ", ".join(durables.get(f"reventless group {c.group} on topic {t}", []))
            for c in channels.collectors
            for t in c.topics
        }
        return _Names("nats", topics, groups, {})
    if "Resources" in infra:  # an AWS CloudFormation template
        res = infra["Resources"].values()
        sns = [r["Properties"]["TopicName"] for r in res if r["Type"] == "AWS::SNS::Topic"]
        queues = [
            r["Properties"]["QueueName"]
            for r in res
            if r["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in r["Properties"]
        ]
        by_group = dict(zip((c.group for c in channels.collectors), queues, strict=True))
        return _Names(
            "aws",
            dict(zip(channels.topics, sns, strict=True)),
            {(c.group, t): by_group[c.group] for c in channels.collectors for t in c.topics},
            by_group,
        )
    raise SpecError(f"the {scheme!r} broker's infrastructure is not one AsyncAPI can describe")


_KEY = re.compile(r"[^A-Za-z0-9_-]")


def _key(*parts: str) -> str:
    return "-".join(_KEY.sub("_", p) for p in parts)


def _servers(url: str, family: str, taken: set[str]) -> dict[str, Any]:
    """The servers of one broker URL (``sns`` and ``sqs`` for ``sns+sqs``); no credentials."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    hosts = parts.netloc.rpartition("@")[2]

    def name(base: str) -> str:
        n, i = base, 1
        while n in taken:
            i += 1
            n = f"{base}-{i}"
        taken.add(n)
        return n

    if family == "memory":
        return {
            name("memory"): {
                "host": "localhost",
                "protocol": "memory",
                "description": "The in-process broker (InMemoryBroker): no network; "
                "'memory' is a reventless-specific protocol name, not an AsyncAPI binding.",
            }
        }
    if family == "nats":
        seeds = [h for h in (hosts or "127.0.0.1:4222").split(",") if h]
        tls = parts.scheme == "nats+tls" or any(k.startswith("tls_") for k in query)
        return {
            name("nats"): {
                "host": seeds[0],
                "protocol": "nats",
                "description": "NATS JetStream"
                + (" over TLS" if tls else "")
                + (f"; seed servers: {', '.join(seeds)}" if len(seeds) > 1 else ""),
            }
        }
    region = parts.hostname or "us-east-1"
    endpoint = query.get("endpoint", "")
    out = {}
    for proto in ("sns", "sqs"):
        host = urlsplit(endpoint).netloc if endpoint else f"{proto}.{region}.amazonaws.com"
        out[name(proto)] = {
            "host": host,
            "protocol": proto,
            "description": f"AWS {proto.upper()} in {region}"
            + (f" (endpoint {endpoint})" if endpoint else ""),
        }
    return out


def _message(family: str, topic: str, kind: str) -> dict[str, Any]:
    body = (
        "the body is the Arrow IPC stream in base64"
        if family == "aws"
        else "the payload is an Arrow IPC stream"
    )
    return {
        "name": topic,
        "title": f"{topic} events",
        "summary": f"A batch of events of {kind} topic {topic} from one partition; {body}.",
        "contentType": ARROW_STREAM,
        "headers": {"$ref": f"#/components/schemas/{family.capitalize()}Headers"},
        "payload": {"$ref": f"#/components/schemas/{schema_key(topic, 'Batch')}"},
    }


def _channels(
    doc: dict[str, Any], names: _Names, channels: Channels, servers: list[str], app: App
) -> None:
    """Channels and operations of one broker URL."""
    family = names.family
    refs = [{"$ref": f"#/servers/{s}"} for s in servers]
    send_servers = refs[:1]  # sns+sqs: the relay publishes to SNS, collectors read SQS
    recv_servers = refs[-1:]
    partitions = {t: p for t, (p, _) in channels.topics.items()}
    tenants = {n: t.definition.tenant for n, t in app.topics.items()}
    for topic, address in names.topics.items():
        ch = _key(servers[0], topic)
        msg = {topic: {"$ref": f"#/components/messages/{schema_key(family, topic)}"}}
        channel: dict[str, Any] = {
            "address": address,
            "title": f"topic {topic}",
            "description": f"Topic {topic} ({partitions[topic]} partition(s)"
            + (f", tenant {tenants[topic]}" if tenants.get(topic) else "")
            + ").",
            "servers": send_servers if family == "aws" else refs,
            "messages": msg,
        }
        if "{partition}" in address:
            channel["parameters"] = {
                "partition": {
                    "description": "Subject partition: the topic partition modulo the URL's "
                    "partitions option.",
                }
            }
        doc["channels"][ch] = channel
        doc["operations"][_key(servers[0], "relay", topic)] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{ch}"},
            "title": f"relay publishes {topic}",
            "summary": "The App's outbox relay publishes committed events after the commit.",
            "messages": [{"$ref": f"#/channels/{ch}/messages/{topic}"}],
            "x-reventless-component": "relay",
        }
    kinds = {n: type(c).__name__ for n, c in app.components.items()}
    for c in channels.collectors:
        component = _component_of(c.group, kinds)
        if family == "aws":
            queue = names.queues[c.group]
            ch = _key(servers[-1], c.group)
            doc["channels"][ch] = {
                "address": queue,
                "title": f"queue of {c.group}",
                "description": f"SQS queue of consumer group {c.group}, subscribed to "
                f"{', '.join(c.topics)} (raw delivery); its dead-letter queue takes "
                "messages received too often.",
                "servers": recv_servers,
                "messages": {
                    t: {"$ref": f"#/components/messages/{schema_key(family, t)}"} for t in c.topics
                },
            }
        for topic, types in c.topics.items():
            target = ch if family == "aws" else _key(servers[0], topic)
            op: dict[str, Any] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{target}"},
                "title": f"{component} receives {topic}",
                "summary": f"{kinds.get(component, 'collector')} {component} "
                + (
                    "handles every event"
                    if types is None
                    else f"handles {', '.join(sorted(types))}"
                )
                + ("" if c.ordered else " (unordered)")
                + ".",
                "messages": [{"$ref": f"#/channels/{target}/messages/{topic}"}],
                "x-reventless-component": component,
                "x-reventless-group": c.group,
                "x-reventless-consumer": names.groups[(c.group, topic)],
            }
            if c.partitions is not None:
                op["x-reventless-partitions"] = sorted(c.partitions)
            doc["operations"][_key(servers[-1], c.group, topic)] = op


def _component_of(group: str, kinds: dict[str, str]) -> str:
    """The component a consumer group belongs to (a member's or lease's group name starts
    with the component's name)."""
    for name in sorted(kinds, key=len, reverse=True):
        if group == name or group.startswith(name + "."):
            return name
    return group


__all__ = ["ARROW_STREAM", "ASYNCAPI_VERSION", "HEADERS", "document"]
