"""Infrastructure derived from an App's declarations: the channels (topics and the
collectors that read them, from the App's ``Topology``), the SQL DDL of its store, and per
broker URL the document the broker's plugin synthesises (JetStream stream/consumer
definitions with ``reventless-nats``, an AWS CloudFormation template with
``reventless-aws``). Pure: nothing here connects anywhere, and no adapter is named here
but by its distribution, in the hint when it is missing.

Example::

    from reventless.synth import synth

    synth(app, "infra/generated", aws_url="sns+sqs://eu-west-1?prefix=shop")

or ``reventless infra synth --app my.module:app --out infra/generated``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .broker import Channels, CollectorChannel, Synthesis, plugin_for
from .broker.plugin import scheme_of
from .collect.component import ReadModel
from .errors import BrokerError, SpecError
from .store.script import ddl_script

if TYPE_CHECKING:
    from .app import App

_NEEDS_NATS = "JetStream definitions need reventless-nats installed"
_NEEDS_AWS = "the CloudFormation template needs reventless-aws installed"


def channels_of(app: App) -> Channels:
    """The channels of ``app``'s declarations (no I/O)."""
    return app.topology().channels()


def sql_ddl(app: App, dialect: str = "sqlite") -> str:
    """The DDL of ``app``'s store for ``dialect`` (``sqlite`` or ``postgresql``): system
    tables, one table per topic, one per read model."""
    return ddl_script(
        dialect,
        [t.definition for t in app.topics.values()],
        [c for c in app.components.values() if isinstance(c, ReadModel)],
    )


def synthesis(url: str, missing: str | None = None) -> Synthesis:
    """What the plugin of broker ``url``'s scheme synthesises; ``SpecError`` (``missing``,
    if given) when no installed plugin serves the scheme or it synthesises nothing."""
    try:
        plugin = plugin_for(url)
    except BrokerError as exc:
        raise SpecError(missing or str(exc)) from exc
    if plugin.synth is None:
        raise SpecError(f"the {scheme_of(url)!r} broker has no infrastructure to synthesise")
    return plugin.synth


def jetstream(channels: Channels, nats_url: str = "nats://127.0.0.1:4222") -> dict[str, Any]:
    """JetStream stream and consumer definitions (JetStream API JSON) as the NATS adapter
    declares them; needs ``reventless-nats`` for the name mapping."""
    return synthesis(nats_url, _NEEDS_NATS).render(channels, nats_url)


def cloudformation(channels: Channels, aws_url: str = "sns+sqs://us-east-1") -> dict[str, Any]:
    """The AWS CloudFormation template of ``channels``; needs ``reventless-aws``."""
    return synthesis(aws_url, _NEEDS_AWS).render(channels, aws_url)


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
    for url, missing in ((aws_url, _NEEDS_AWS), (nats_url, _NEEDS_NATS)):
        if url is not None:
            hook = synthesis(url, missing)
            written.append(_write(path / hook.file, hook.render(channels, url)))
    for d in dialects:
        target = path / f"schema.{d}.sql"
        target.write_text(sql_ddl(app, d))
        written.append(target)
    return written


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    return path


__all__ = [
    "Channels",
    "CollectorChannel",
    "channels_of",
    "cloudformation",
    "jetstream",
    "sql_ddl",
    "synth",
    "synthesis",
]
