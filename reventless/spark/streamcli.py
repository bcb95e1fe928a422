"""What ``reventless stream COMPONENT --app module:app [--master URL] [--trigger 5s]`` runs.

``COMPONENT`` is a read model the App collects (by name: its handlers run in the
stream) or ``module:attribute`` naming a ``rv.ReadModel``: its handlers, or the pipeline
its module lists in ``PIPELINES[<read model name>]`` (see ``examples/shop/
revenue_stream.py``). The stream runs until interrupted (Ctrl-C, SIGTERM or ``stop``)
and reports every micro-batch to ``on_progress``.

Example::

    run_stream(app, "examples.shop.revenue_stream:sku_hours", trigger="5s",
               on_progress=lambda p: print(p.batch_id, p.rows_in, p.lag, p.seconds))
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..collect.component import ReadModel
from ..errors import StreamError
from ..store.streamsink import StreamState
from .stream import Pipeline, StreamProgress, parse_trigger

if TYPE_CHECKING:
    from ..app import App


def resolve(app: App, component: str) -> tuple[ReadModel[Any], Pipeline | None]:
    """The read model ``component`` names and its pipeline (None: its handlers);
    ``StreamError`` if it names nothing streamable."""
    if ":" in component:
        module_name, _, attr = component.partition(":")
        try:
            module = importlib.import_module(module_name)
            obj = getattr(module, attr)
        except (ImportError, AttributeError) as exc:
            raise StreamError(f"cannot load component {component!r}: {exc}") from None
        if not isinstance(obj, ReadModel):
            raise StreamError(
                f"{component} is a {type(obj).__name__}, not a read model: only read models "
                "stream into a table"
            )
        pipes = getattr(module, "PIPELINES", {})
        pipe = pipes.get(obj.name) if isinstance(pipes, dict) else None
        if pipe is None and not (obj.handlers or obj.topic_handlers):
            raise StreamError(
                f"{component}: no handlers, and {module_name}.PIPELINES has no pipeline "
                f"for {obj.name!r}"
            )
        return obj, pipe
    found = app.components.get(component)
    if found is None:
        streamable = sorted(n for n, c in app.components.items() if isinstance(c, ReadModel))
        raise StreamError(
            f"unknown component {component!r}; the App's read models: "
            f"{', '.join(streamable) or '(none)'} (or name one as module:attribute)"
        )
    if not isinstance(found, ReadModel):
        raise StreamError(
            f"{component} is a {type(found).__name__}: only read models stream into a table"
        )
    return found, None


def run_stream(
    app: App,
    component: str,
    *,
    master: str | None = None,
    trigger: str | float | None = "5s",
    checkpoint: str | Path | None = None,
    max_events_per_trigger: int | None = None,
    on_progress: Callable[[StreamProgress], None] | None = None,
    stop: threading.Event | None = None,
) -> StreamState | None:
    """Run ``component`` (see the module docstring) as a streaming projection of
    ``app``'s log on Spark ``master`` until interrupted or ``stop`` is set; returns what
    the store holds of it at the end (last batch id, positions, rows, late rows).

    Bad input (an unknown or unstreamable component, a bad trigger) raises
    ``StreamError`` before Spark starts; a failure of the query raises its error."""
    from .streamrun import start_stream

    parse_trigger(trigger)  # bad input fails before the session starts
    model, pipeline = resolve(app, component)
    running = start_stream(
        model,
        app,
        pipeline,
        master=master,
        checkpoint=checkpoint,
        trigger=trigger,
        max_events_per_trigger=max_events_per_trigger,
        on_progress=on_progress,
    )
    halt = stop or threading.Event()
    try:
        while not halt.is_set() and running.query.isActive:
            halt.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    return running.state()
