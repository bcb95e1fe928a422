"""Pages of a collector (rows or Arrow columns) and ``EventBatch``, what batch handlers get.

A collector reads a page either as rows (``list[StoredRow]``) or, where every handler of
the topic takes batches and the store reads Arrow natively, as an Arrow table of the
stored columns. The helpers here answer the same questions of both (offsets, traces,
what comes after a checkpoint) so the catch-up loop does not care which it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ..codec import OFFSET_AT, TRACE_AT, TYPE_AT
from ..decode import envelopes_of, opened
from ..errors import SpecError
from ..spec import Envelope, Event
from ..store.append import StoredRow

if TYPE_CHECKING:
    from ..codec import TopicSchema
    from ..store.port import Store

E = TypeVar("E", bound=Event)

#: One page of a topic partition: rows, or its stored columns as Arrow (``read_columns``).
Page: TypeAlias = "list[StoredRow] | pa.Table"


# An Arrow page holds every stored column, or (a batch handler's ``columns=``) only some,
# always with these: the helpers below find them by name.
OFFSET, AGGREGATE, TYPE, TRACE = "_offset", "_aggregate_id", "_type", "_trace"
#: The columns a collector reads of every page, whatever its handlers read.
OWN_COLUMNS = (OFFSET, AGGREGATE, TYPE, TRACE)


def first_offset(page: Page) -> int:
    """The offset of the page's first row (the page is not empty)."""
    return int(page[0][OFFSET_AT] if isinstance(page, list) else page.column(OFFSET)[0].as_py())


def last_offset(page: Page) -> int:
    """The offset of the page's last row (the page is not empty)."""
    if isinstance(page, list):
        return int(page[-1][OFFSET_AT])
    return int(page.column(OFFSET)[-1].as_py())


def after(page: Page, checkpoint: int) -> Page:
    """The rows of ``page`` past ``checkpoint``."""
    if isinstance(page, list):
        return [r for r in page if r[OFFSET_AT] > checkpoint]
    return page.filter(pc.greater(page.column(OFFSET), checkpoint))


def traces(page: Page) -> list[str | None]:
    """The rows' trace contexts (telemetry links a batch's span to them)."""
    if isinstance(page, list):
        return [r[TRACE_AT] for r in page]
    col = page.column(TRACE)
    return [None] * len(page) if col.null_count == len(page) else col.to_pylist()


def rows_of(page: Page) -> list[StoredRow]:
    """The page as rows (the values an SQL driver gives; a page of every column)."""
    if isinstance(page, list):
        return page
    return list(zip(*(c.to_pylist() for c in page.columns), strict=True))


def of_types(page: Page, types: Collection[str]) -> Page:
    """The rows of ``page`` whose event type is one of ``types``."""
    if isinstance(page, list):
        return [r for r in page if r[TYPE_AT] in types]
    col = page.column(TYPE)
    keep = pc.is_in(col, value_set=pa.array(list(types), col.type))
    return page if pc.all(keep).as_py() else page.filter(keep)


class EventBatch(Generic[E]):
    """The events of one page that a batch handler takes (``@handler.on_batch``), in
    offset order, all of one topic partition.

    ``arrow`` is the batch as Arrow columns (the topic's ``arrow_schema``: metadata
    columns, then the events' fields; personal fields opened as in ``read_batches``). It
    costs no Python object per event: count, sum or write them somewhere in bulk.
    ``envelopes()`` (also ``for ev in batch``) decodes them as ``Envelope``s on first use.
    A handler that named its ``columns`` (``on_batch(..., columns=[...])``) gets only those
    and ``OWN_COLUMNS`` in ``arrow``, and no envelopes.

    Example::

        @mailer.on_batch(OrderPlaced)
        async def _(batch: rv.EventBatch[OrderPlaced]) -> None:
            await warehouse.insert(batch.arrow.select(["_aggregate_id", "total"]))
    """

    __slots__ = ("_decode", "_envelopes", "_rows", "arrow", "columns", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        arrow: pa.RecordBatch,
        rows: Callable[[], list[StoredRow]],
        decode: Callable[[list[StoredRow]], list[Envelope[Any]]],
        columns: tuple[str, ...] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.arrow = arrow
        #: The columns its handler declared (``on_batch(columns=...)``; None: all).
        self.columns = columns
        self._rows = rows
        self._decode = decode
        self._envelopes: list[Envelope[E]] | None = None

    def __len__(self) -> int:
        return int(self.arrow.num_rows)

    def __iter__(self) -> Iterator[Envelope[E]]:
        return iter(self.envelopes())

    def __repr__(self) -> str:
        return f"EventBatch({self.topic!r}, partition={self.partition}, events={len(self)})"

    @property
    def first_offset(self) -> int:
        """The offset of the first event (0 for an empty batch)."""
        col = self.arrow.column(OFFSET)
        return int(col[0].as_py()) if len(col) else 0

    @property
    def last_offset(self) -> int:
        """The offset of the last event (0 for an empty batch)."""
        col = self.arrow.column(OFFSET)
        return int(col[-1].as_py()) if len(col) else 0

    def envelopes(self) -> list[Envelope[E]]:
        """The events as envelopes, decoded on the first call. ``SpecError`` for a batch
        of a handler that declared its ``columns`` (it was read without the others)."""
        if self.columns is not None:
            raise SpecError(
                f"a batch of {self.topic!r} read with columns={list(self.columns)} has no "
                "envelopes (they need every column): read batch.arrow, or drop columns="
            )
        if self._envelopes is None:
            self._envelopes = self._decode(self._rows())
        return self._envelopes


def page_columns(schema: TopicSchema, declared: Sequence[str]) -> list[str]:
    """The columns a collector reads of its pages when its handlers read only
    ``declared`` (a batch handler's ``columns=``, a fold's own): those and
    ``OWN_COLUMNS``, in the schema's order (``SchemaMismatchError``: a name it lacks)."""
    schema.projection(list(declared))
    wanted = {*declared, *OWN_COLUMNS}
    return [n for n in schema.arrow_schema.names if n in wanted]


async def event_batch(
    store: Store,
    schema: TopicSchema,
    topic: str,
    partition: int,
    page: Page,
    columns: Sequence[str] | None = None,
) -> EventBatch[Any]:
    """The ``EventBatch`` of ``page`` (rows as the store holds them: personal fields are
    opened here, in the Arrow columns and in the envelopes). ``columns``: the batch holds
    only those (``page_columns``); an Arrow page was read with exactly them, rows have
    every column."""
    decode = _decoder(schema, topic)
    if columns is not None:
        if isinstance(page, list) or schema.personal:
            full = schema.to_arrow(page) if isinstance(page, list) else schema.from_storage(page)
            if schema.personal:
                full = await store.keyring.open_batch(schema, full)
            arrow = full.select(list(columns))
        else:
            arrow = schema.select_storage(page, schema.projection(list(columns)))
        return EventBatch(topic, partition, arrow, list, decode, tuple(columns))
    arrow = schema.to_arrow(page) if isinstance(page, list) else schema.from_storage(page)
    if schema.personal:
        arrow = await store.keyring.open_batch(schema, arrow)
        rows = await opened(store, schema, rows_of(page))
        return EventBatch(topic, partition, arrow, lambda: rows, decode)
    return EventBatch(topic, partition, arrow, lambda: rows_of(page), decode)


def _decoder(schema: TopicSchema, topic: str) -> Callable[[list[StoredRow]], list[Envelope[Any]]]:
    def decode(rows: list[StoredRow]) -> list[Envelope[Any]]:
        return envelopes_of(schema, topic, rows)

    return decode
