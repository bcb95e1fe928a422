"""Columns that held one value in every row read so far are read as one flag.

Once a long page of a topic was read as Arrow, the metadata columns that were NULL in
all its rows (``_causation_id``, ``_user``, ``_ip``, ``_tenant``, ``_trace``) and the
integers that held one value (``_schema_version``, ``_partition``) are asked for as one
column, NULL where each holds what it did (the driver decodes a NULL at the cost of a
value). A page whose flag shows otherwise is read again whole, and the columns that
held something else are read as themselves from then on. Either way the batches equal
those built from the same rows read through SQL.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import reventless as rv
from reventless.store import arrowread
from tests.arrow_pages import arrow_widths, helpers_ready, rows_only
from tests.model import Counter, Incremented

PAGE = arrowread.LEARN_AT  # (a shorter page teaches nothing)
#: Counter's stored columns: 16 of metadata and ``by``.
WHOLE = 17
#: A page with the seven columns as one flag.
FOLDED = WHOLE - 7 + 1


async def batches(log: rv.EventLog[Counter]) -> list[pa.RecordBatch]:
    return [b async for b in log.read_batches(batch_size=PAGE)]


async def from_rows(
    app: rv.App, log: rv.EventLog[Counter], monkeypatch: pytest.MonkeyPatch
) -> list[pa.RecordBatch]:
    """The same read, its batches built from SQL rows."""
    with monkeypatch.context() as m:
        m.setattr(type(app.store), "stream_columns", rows_only)
        return await batches(log)


def same(arrow: list[pa.RecordBatch], rows: list[pa.RecordBatch]) -> None:
    assert [b.num_rows for b in arrow] == [b.num_rows for b in rows]
    for a, r in zip(arrow, rows, strict=True):
        assert a.schema == r.schema and a.equals(r)


async def plain(log: rv.EventLog[Counter], first: int, n: int) -> None:
    await log.append_many([(f"c-{k}", [Incremented(by=k)], 0) for k in range(first, first + n)])


async def test_a_page_with_values_is_read_whole_and_teaches_the_next_reads(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    widths = arrow_widths(monkeypatch)
    app = rv.App(store=shared_url)
    log = app.event_log(Counter)
    meta = rv.Metadata(user="ann", causation_id="cause-1", ip="10.0.0.7")
    async with app:
        half = PAGE // 2
        await plain(log, 0, PAGE + half)  # the second page's middle row holds values
        await log.append_many([("c-meta", [Incremented(by=7)], 0)], meta=meta)
        await plain(log, PAGE + half + 1, 2 * PAGE - half - 4)
        # the third page's last three rows: one command's events (``_row_idx`` 0, 1, 2)
        await log.append("c-three", [Incremented(by=1)] * 3, expected_version=0)
        await helpers_ready(app)
        async for _ in log.read_batches(batch_size=PAGE, upto=PAGE):  # learned here
            pass
        assert widths == [WHOLE], widths
        widths.clear()
        first = await batches(log)
        learned = list(widths)
        widths.clear()
        again = await batches(log)
        rows = await from_rows(app, log, monkeypatch)
    assert sum(b.num_rows for b in rows) == 3 * PAGE
    same(first, rows)
    same(again, rows)
    # the first read: each page folded, the one with values again whole (the third page
    # may be asked after the second taught the read, with four columns as the flag)
    assert len(learned) == 4 and learned.count(WHOLE) == 1, learned
    assert {w for w in learned if w != WHOLE} <= {FOLDED, WHOLE - 4 + 1}, learned
    # then those three columns are read as themselves, the four others still as one flag
    assert widths == [WHOLE - 4 + 1] * 3, widths
    users = pa.concat_arrays([b.column("_user") for b in again]).to_pylist()
    assert users.count("ann") == 1 and users.index("ann") == PAGE + half
    assert again[-1].column("_row_idx").to_pylist()[-4:] == [0, 0, 1, 2]


async def test_a_value_written_by_another_app_after_a_folded_read_is_read(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    widths = arrow_widths(monkeypatch)
    reader, writer = rv.App(store=shared_url), rv.App(store=shared_url)
    log, other = reader.event_log(Counter), writer.event_log(Counter)
    async with reader, writer:
        await plain(log, 0, 2 * PAGE)
        await helpers_ready(reader)
        assert sum(b.num_rows for b in await batches(log)) == 2 * PAGE
        assert widths == [WHOLE] * 2, widths  # nothing learned yet: read whole
        assert sum(b.num_rows for b in await batches(log)) == 2 * PAGE
        assert widths[-2:] == [FOLDED] * 2, widths  # learned: all seven folded
        widths.clear()
        # another App (a store of its own: what this reader learned is not shared)
        await other.append_many(
            [("late", [Incremented(by=1)], 0)], meta=rv.Metadata(user="bob", ip="::1")
        )
        got = await batches(log)
        rows = await from_rows(reader, log, monkeypatch)
    same(got, rows)
    last = got[-1]
    assert last.column("_user").to_pylist()[-1] == "bob"
    assert last.column("_ip").to_pylist()[-1] == "::1"
    # the last page again whole (the pages are read at once: they end in any order)
    assert sorted(widths) == [FOLDED, FOLDED, FOLDED, WHOLE], widths


async def test_a_read_of_a_few_columns_leaves_the_others_to_be_learned_later(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first read of three columns teaches two folds; the first read of every column
    then reads those two as the flag and the other five as themselves, and learns them
    from that page: the reads after it fold all seven."""
    widths = arrow_widths(monkeypatch)
    app = rv.App(store=shared_url)
    log = app.event_log(Counter)
    async with app:
        await plain(log, 0, PAGE)
        await helpers_ready(app)
        few = ["_offset", "_user", "_ip"]
        for _ in range(2):
            got = [b async for b in log.read_batches(batch_size=PAGE, columns=few)]
            assert sum(b.num_rows for b in got) == PAGE
        assert widths == [3, 2], widths  # learned: _user and _ip as one flag
        widths.clear()
        first, second = await batches(log), await batches(log)
        rows = await from_rows(app, log, monkeypatch)
    same(first, rows)
    same(second, rows)
    assert widths == [WHOLE - 2 + 1, FOLDED], widths
