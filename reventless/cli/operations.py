"""The commands that load the application (``--app``): ``infra synth``, ``rebuild``,
``forget``, ``docs asyncapi``; and ``master-key``.

Example::

    reventless infra synth --app examples.shop.model:app --out infra/generated
    reventless rebuild examples.shop.stats:customer_orders --app examples.shop.model:app
    reventless docs asyncapi --app examples.shop.model:app --out asyncapi.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .letters import AppSpec, FactoryStore
from .loading import import_attr, kind, load_app
from .output import Meter, meter
from .params import OFFSET, dialects
from .run import UsageError, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Seconds between two reads of Spark's status tracker during ``rebuild``.
SPARK_POLL = 0.5


def infra_synth(
    app: AppSpec,
    out: Annotated[str, typer.Option("--out", help="output directory")] = "infra/generated",
    aws_url: Annotated[
        str, typer.Option("--aws-url", help="names ('none': skip)")
    ] = "sns+sqs://us-east-1",
    nats_url: Annotated[
        str, typer.Option("--nats-url", help="names ('none': skip)")
    ] = "nats://127.0.0.1:4222",
    dialect: Annotated[
        tuple[str, ...] | None,
        typer.Option("--dialect", parser=dialects, help="SQL dialects of the DDL"),
    ] = None,
) -> None:
    """Write a CloudFormation template, JetStream definitions and SQL DDL.

    Derived from the app's declarations; no I/O but the files."""
    run(_infra_synth(app, out, aws_url, nats_url, dialect))


async def _infra_synth(
    spec: str, out: str, aws_url: str, nats_url: str, dialects: tuple[str, ...] | None
) -> None:
    from ..synth import synth, synthesis
    from .params import DIALECTS

    aws = None if aws_url == "none" else aws_url
    nats = None if nats_url == "none" else nats_url
    for url in (aws, nats):  # a missing adapter fails before any file is written
        if url is not None:
            synthesis(url)
    written = synth(load_app(spec), out, aws_url=aws, nats_url=nats, dialects=dialects or DIALECTS)
    for path in written:
        print(f"wrote {path}")


def forget(
    subject: Annotated[str, typer.Argument(help="the data subject's id (rv.Personal(subject=))")],
    app: AppSpec,
    store: FactoryStore = None,
) -> None:
    """Forget a data subject: destroy its key (crypto-shredding), run on_forget hooks."""
    run(_forget(subject, app, store))


async def _forget(subject: str, spec: str, store: str | None) -> None:
    app = load_app(spec, store)
    async with app:
        done = await app.forget(subject)
    print(f"forgotten: {done.keys} key(s) destroyed, {done.rows} read-model row(s) erased")


def master_key() -> None:
    """Print a new random master key (for REVENTLESS_MASTER_KEY or its file)."""
    from ..store.keys import MasterKey

    print(MasterKey.generate().text)


class Source(StrEnum):
    """``rebuild --source``."""

    auto = "auto"
    parquet = "parquet"
    jdbc = "jdbc"


def rebuild(
    read_model: Annotated[str, typer.Argument(help="module:attribute of the ReadModel")],
    app: AppSpec,
    store: FactoryStore = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default local[*])")
    ] = None,
    as_of: Annotated[
        int | None, typer.Option("--as-of", parser=OFFSET, help="state at this offset")
    ] = None,
    source: Annotated[Source, typer.Option("--source")] = Source.auto,
    workdir: Annotated[
        str | None, typer.Option("--workdir", help="segments and staging files")
    ] = None,
) -> None:
    """Rebuild a read model from the log with Spark (extra 'spark').

    Progress on stderr shows the stage and Spark's tasks."""
    run(_rebuild(read_model, app, store, master, as_of, source.value, workdir))


async def _rebuild(
    read_model: str,
    spec: str,
    store: str | None,
    master: str | None,
    as_of: int | None,
    source: Any,
    workdir: str | None,
) -> None:
    from ..collect import ReadModel

    model = import_attr(read_model, "the read model")
    if not isinstance(model, ReadModel):
        raise UsageError(f"{read_model} is {kind(model)}, not a ReadModel")
    app = load_app(spec, store)
    try:
        from ..spark import rebuild, session
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    with meter(f"rebuild {model.name}: starting Spark", None, "tasks") as m:
        try:
            spark = await asyncio.to_thread(session, master)
        except ImportError as exc:
            raise UsageError(str(exc)) from exc
        with _spark_tasks(spark, m):
            report = await rebuild(
                model,
                app,
                spark=spark,
                as_of=as_of,
                source=source,
                workdir=workdir,
                progress=lambda msg: m.describe(f"rebuild {model.name}: {msg}"),
            )
    print(
        f"rebuilt {report.model} ({report.path}): events read {report.events_read}, "
        f"events applied {report.events_applied}, rows written {report.rows}, "
        f"seconds {report.seconds:.1f}, table {report.table}"
    )


@contextlib.contextmanager
def _spark_tasks(spark: SparkSession, m: Meter) -> Iterator[None]:
    """While the block runs, a thread reads Spark's status tracker: the meter counts the
    tasks of every stage seen so far (its total grows as stages start)."""
    import threading

    tracker = spark.sparkContext.statusTracker()
    stages: dict[int, tuple[int, int]] = {}  # stage id -> (tasks, completed)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(SPARK_POLL):
            with contextlib.suppress(Exception):  # the context stopping under us
                for sid in [*tracker.getActiveStageIds(), *stages]:
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        stages[sid] = (info.numTasks, info.numCompletedTasks)
                if stages:
                    total = sum(t for t, _ in stages.values())
                    done = sum(c for _, c in stages.values())
                    m.update(completed=done, total=total)

    thread = threading.Thread(target=poll, name="spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=max(5.0, SPARK_POLL * 4))


def asyncapi(
    app: AppSpec,
    out: Annotated[
        str | None, typer.Option("--out", help="write the document here (default: stdout)")
    ] = None,
    broker: Annotated[
        list[str] | None,
        typer.Option(
            "--broker",
            help="a broker URL to describe (repeatable; channel names follow its options); "
            "default: the app's own broker",
        ),
    ] = None,
) -> None:
    """Write an AsyncAPI 3.0 document (JSON) of the app's topics, channels and messages."""
    run(_asyncapi(app, out, broker or None))


async def _asyncapi(spec: str, out: str | None, brokers: list[str] | None = None) -> None:
    try:
        from ..docs.asyncapi import document
    except ImportError as exc:
        if exc.name == "reventless.docs.asyncapi":
            raise UsageError(
                "reventless docs asyncapi is not available in this version "
                "(reventless.docs.asyncapi is missing)"
            ) from None
        raise UsageError(f"reventless docs asyncapi: {exc}") from None
    try:
        doc = document(load_app(spec), brokers=brokers)
    except ValueError as exc:  # a broker URL that does not parse or has no adapter
        raise UsageError(f"--broker: {exc}") from None
    text = json.dumps(doc, indent=2) + "\n"
    if out is None:
        sys.stdout.write(text)
        return
    write_atomically(out, text)
    print(f"wrote {out}", file=sys.stderr)


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, renamed when complete."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--out {path} is a directory; give the document's file path")
    if not target.parent.is_dir():
        raise UsageError(f"--out {path}: no directory {target.parent}")
    partial = target.with_name(f".{target.name}.part")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
