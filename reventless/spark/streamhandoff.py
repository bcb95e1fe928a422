"""Hand-off of a read model between its live collector and a streaming projection.

The read model's checkpoints (``rv_checkpoints``) say which events its table reflects,
whoever wrote it: the live collector, a Spark rebuild or a stream all commit rows and
checkpoints together. So the owner can change without applying an event twice or
missing one:

* ``hand_to_stream``: pause the live collector, wait for its batch in flight, start the
  stream at the stored checkpoints with the table's rows as its state. (After
  ``rv.spark.rebuild`` the checkpoints are the rebuild's offsets: the stream continues
  from them.) While the stream owns the model, a collector that moved the checkpoints
  anyway would fail the stream's next batch (``StreamFencedError``), nothing landed.
* ``hand_to_collector``: stop the stream (its last batch is committed), give the
  collector the stored checkpoints and resume it; it catches up from there.

Example::

    running = await hand_to_stream(stock_levels, app, trigger="1s")
    ...
    await hand_to_collector(running, app)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..collect.component import ReadModel
from ..errors import SpecError, StreamError
from .stream import StreamQuery

if TYPE_CHECKING:
    from ..app import App
    from ..collect.collector import Collector


def _collector(app: App, name: str) -> Collector | None:
    try:
        return app.collector(name)
    except SpecError:
        return None


async def hand_to_stream(model: ReadModel[Any], app: App, **start: Any) -> StreamQuery:
    """Pause ``model``'s live collector in ``app`` (if it runs) and start the stream of
    its handlers from the stored checkpoints (``start``: ``start_stream``'s options).
    The checkpoint directory must be new (or the stream's own from before)."""
    from .streamrun import start_stream

    collector = _collector(app, model.name)
    if collector is not None:
        collector.pause()
        async with collector.exclusive():  # its batch in flight has committed
            pass
    try:
        return await asyncio.to_thread(start_stream, model, app, None, **start)
    except BaseException:
        if collector is not None:
            collector.resume()
        raise


async def hand_to_collector(running: StreamQuery, app: App) -> dict[tuple[str, int], int]:
    """Stop ``running`` and resume the read model's live collector in ``app`` from the
    checkpoints the stream committed (returned); it catches up from there."""
    await asyncio.to_thread(running.stop)
    collector = _collector(app, running.name)
    if collector is None:
        raise StreamError(f"{running.name}: no live collector runs it in this App")
    checkpoints, _parked = await collector.store.collectors.load(running.name)
    async with collector.exclusive():
        collector.reset_checkpoints(checkpoints)
    collector.resume()
    for topic, partition in list(collector.checkpoints):
        await collector.catch_up(topic, partition)
    return checkpoints
