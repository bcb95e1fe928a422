"""``reventless stream``: a read model computed by a Spark Structured Streaming query over
the log (extra 'spark'), with a line of progress per micro-batch.

Example::

    reventless stream examples.shop.revenue_stream:sku_hours \\
        --app examples.shop.revenue_stream:app --trigger 5s
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ReventlessError
from .letters import AppSpec, FactoryStore
from .loading import load_app
from .run import INTERRUPTED, UsageError, fail

if TYPE_CHECKING:
    from ..spark.stream import StreamProgress


def stream(
    component: Annotated[
        str,
        typer.Argument(
            help="a read model the app collects (by name), or module:attribute of a "
            "ReadModel (its handlers, or its module's PIPELINES[name])"
        ),
    ],
    app: AppSpec,
    store: FactoryStore = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default local[*])")
    ] = None,
    trigger: Annotated[
        str,
        typer.Option(
            "--trigger", help="micro-batch interval ('5s', '500ms', 2) or 'available' (run once)"
        ),
    ] = "5s",
    checkpoint: Annotated[
        str | None,
        typer.Option("--checkpoint", help="Spark checkpoint directory (default under the workdir)"),
    ] = None,
    max_events: Annotated[
        int | None,
        typer.Option("--max-events", min=1, help="at most this many events per micro-batch"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="one JSON object per micro-batch on stdout")
    ] = False,
) -> None:
    """Run a read model as a streaming projection on Spark until Ctrl-C (extra 'spark').

    Each micro-batch's rows and the stream's position commit in one transaction, so a
    stopped or killed stream restarts where it stopped. A line per batch (stderr, or
    JSON on stdout with --json) shows events read, rows written, late rows, lag and the
    batch's duration."""
    try:
        from ..spark.streamcli import run_stream
    except ImportError as exc:
        fail(f"reventless stream needs the extra: pip install 'reventless[spark]' ({exc})")
    halt = threading.Event()

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        halt.set()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        rv_app = load_app(app, store)
        state = run_stream(
            rv_app,
            component,
            master=master,
            trigger=trigger,
            checkpoint=checkpoint,
            max_events_per_trigger=max_events,
            on_progress=_json_line if as_json else _progress_line,
            stop=halt,
        )
    except UsageError as exc:
        fail(str(exc))
    except ReventlessError as exc:
        fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if state is not None:
        where = ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(state.positions.items()))
        print(
            f"stream {state.query}: last batch {state.batch_id}, rows {state.rows}, "
            f"late rows {state.late}, positions {where or '-'}",
            file=sys.stderr if as_json else sys.stdout,
        )


def _progress_line(p: StreamProgress) -> None:
    lag = ", ".join(f"{t}={n:,}" for t, n in sorted(p.lag.items())) or "-"
    print(
        f"{p.name} batch {p.batch_id}: {p.rows_in:,} events in, {p.rows_out:,} rows out, "
        f"{p.late:,} late, lag {lag}, {p.seconds:.2f} s"
        + (f", watermark {p.watermark}" if p.watermark else ""),
        file=sys.stderr,
        flush=True,
    )


def _json_line(p: StreamProgress) -> None:
    record = {
        "name": p.name,
        "batch_id": p.batch_id,
        "rows_in": p.rows_in,
        "rows_out": p.rows_out,
        "late": p.late,
        "lag": p.lag,
        "seconds": p.seconds,
        "watermark": p.watermark,
    }
    print(json.dumps(record), flush=True)
