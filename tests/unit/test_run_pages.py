"""Live runs decode their Arrow batches into pages: offset order, ``after`` skipped,
several messages' rows sharing a page (one transaction), pages at most ``size``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import reventless as rv
from reventless.codec import META_NAMES, TopicSchema
from reventless.collect.livebatch import Run


class Pinged(rv.Event):
    n: int


SCHEMA = TopicSchema.from_events("Pings", [Pinged])


def rows(first: int, count: int) -> list[tuple[object, ...]]:
    meta = dict.fromkeys(META_NAMES)
    out = []
    for off in range(first, first + count):
        meta |= {"_offset": off, "_row_idx": 0, "_produced_at": 1, "_type": "Pinged"}
        meta |= {"_schema_version": 1, "_msg_id": f"m{off}", "_partition": 0}
        out.append((*meta.values(), off))
    return out


@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
    st.integers(0, 100),
    st.integers(1, 25),
)
def test_pages_cover_offsets_past_after_in_full_pages(
    sizes: list[int], after: int, size: int
) -> None:
    batches, first = [], 1
    for n in sizes:
        batches.append(SCHEMA.to_arrow(rows(first, n)))
        first += n
    run = Run("Pings", 0, [], 1, first - 1, 0, [b for b in batches])
    pages = list(run.pages(SCHEMA, after, size))
    offsets = [r[0] for page in pages for r in page]
    assert offsets == list(range(after + 1, first))
    assert all(len(p) == size for p in pages[:-1])  # only the last page is short
    assert all(0 < len(p) <= size for p in pages)
    assert [r[-1] for page in pages for r in page] == offsets  # the field decoded
