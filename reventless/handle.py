"""Handles on what an App collects: a running collector, and a read model's queries.

Example::

    view = app.collect(order_summaries)   # a Projection
    async with app:
        await view.wait_caught_up()
        print(await view.get("order-1"), await view.lag())
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from .collect.collector import Collector
from .collect.component import Component, ReadModel
from .deadletter import DeadLetter, RedriveReport
from .errors import StoreError
from .store.readmodel import ReadModelStore

if TYPE_CHECKING:
    from .app import App

R = TypeVar("R", bound=BaseModel)


class CollectorHandle:
    """The running side of a collected component: lag, pause/resume, dead letters."""

    def __init__(self, app: App, component: Component) -> None:
        self._app = app
        self.component = component
        self.name = component.name

    @property
    def collector(self) -> Collector:
        """The running collector behind this handle."""
        c = self._app.collectors.get(self.name)
        if c is None:
            raise StoreError(f"collector {self.name!r} is not running: start the App first")
        return c

    async def lag(self) -> dict[str, int]:
        """Per topic: head offset minus checkpoint."""
        return await self.collector.lag()

    @property
    def state(self) -> str:
        """``running``, ``paused`` or ``resnapshot_required`` (a partition's checkpoint is
        behind the retained horizon: it stopped instead of skipping deleted events)."""
        return self.collector.state

    @property
    def resnapshot_required(self) -> dict[tuple[str, int], int]:
        """The stopped ``(topic, partition)``s and their horizon (the last deleted offset)."""
        return dict(self.collector.resnapshot_required)

    async def accept_resnapshot(self) -> None:
        """After rebuilding the state (or accepting the loss): move the stopped partitions'
        checkpoints to their horizon and continue."""
        await self.collector.accept_resnapshot()

    def pause(self) -> None:
        """Stop processing (deliveries wait)."""
        self.collector.pause()

    def resume(self) -> None:
        """Resume processing."""
        self.collector.resume()

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the checkpoint reaches the current head of every topic."""
        await self.collector.wait_caught_up(timeout)

    async def dead_letters(self) -> list[DeadLetter]:
        """Open dead letters of this component."""
        return await self.collector.dead_letters()

    async def redrive(self, aggregate_id: str | None = None) -> RedriveReport:
        """Retry dead letters per aggregate in offset order."""
        return await self.collector.redrive(aggregate_id)


class Projection(CollectorHandle, Generic[R]):
    """A collected ReadModel: its runtime plus queries on its table."""

    def __init__(self, app: App, model: ReadModel[R]) -> None:
        super().__init__(app, model)
        self.model = model

    @property
    def table(self) -> ReadModelStore[R]:
        """The read model's SQL table (queries)."""
        t = self._app.tables.get(self.name)
        if t is None:
            raise StoreError(f"read model {self.name!r} is not built: start the App first")
        return t

    async def get(self, key: Any) -> R | None:
        """The row with ``key`` or None."""
        return await self.table.get(key)

    async def find(self, *, limit: int | None = None, **equals: Any) -> list[R]:
        """Rows matching column equalities."""
        return await self.table.find(limit=limit, **equals)

    async def all(self, *, limit: int | None = None) -> list[R]:
        """All rows, ordered by key."""
        return await self.table.all(limit=limit)

    async def count(self) -> int:
        """Number of rows."""
        return await self.table.count()
