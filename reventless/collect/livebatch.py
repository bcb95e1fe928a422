"""A live run: one topic partition's consecutive broker messages, decoded by the page.

Example::

    run = Run("Order", 0, [], first=11, last=30, prev=10, batches=[table])
    for page in run.pages(schema, after=checkpoint, size=2000):
        ...  # stored-row tuples, offset order, at most 2000 per page
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..codec import TopicSchema
from ..store.append import StoredRow


@dataclass(slots=True)
class Run:
    """Live events of one topic partition covering offsets ``first..last`` after the
    partition's offset ``prev`` (None: unknown): those that passed the filter, as stored
    rows or as the broker's Arrow batches (decoded into rows a page at a time)."""

    topic: str
    partition: int
    rows: list[StoredRow]
    first: int
    last: int
    prev: int | None
    batches: list[pa.Table] = field(default_factory=list)

    def pages(self, schema: TopicSchema, after: int, size: int) -> Iterator[list[StoredRow]]:
        """The rows past offset ``after``, at most ``size`` per page, in offset order.

        Decoding page by page keeps few rows alive at once: a fetch of a hundred
        thousand rows built up front cost more in cyclic GC passes than decoding."""
        buf = [r for r in self.rows if r[0] > after]
        for data in self.batches:  # several messages' rows fill one page (one transaction)
            offsets = data.column("_offset")
            if not len(offsets) or offsets[-1].as_py() <= after:
                continue
            start = int(pc.sum(pc.less_equal(offsets, after)).as_py() or 0)
            for i in range(start, data.num_rows, size):
                buf.extend(
                    schema.from_arrow_rows(data.slice(i, size), with_meta=True, fill_missing=True)
                )
                while len(buf) >= size:
                    yield buf[:size]
                    del buf[:size]
        while buf:
            yield buf[:size]
            del buf[:size]
