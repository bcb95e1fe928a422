"""``envelopes_of_arrow`` (a page of stored columns, built column by column) gives exactly
what ``envelopes_of`` gives for the same page as rows: for any page (mixed event types,
rows of an older schema version that are upcast, events without fields, tags, every kind
of metadata), the same envelopes with values of the same types."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import reventless as rv
from reventless.codec import META_NAMES
from reventless.collect.batch import rows_of
from reventless.decode import envelopes_of, envelopes_of_arrow


class RenamedV1(rv.Event):
    event_type = "Renamed"
    name: str


class Renamed(rv.Event):
    """Version 2: ``name`` became ``first`` and ``last``."""

    schema_version = 2
    first: str
    last: str = ""
    tag: Annotated[str, rv.Tag("who")] = "nobody"

    @rv.upcasts(1, retired={"name": str})
    def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
        first, _, last = data.pop("name").partition(" ")
        return {**data, "first": first, "last": last}


class Pinged(rv.Event):
    pass  # no fields at all


class Counted(rv.Event):
    n: int
    ratio: float | None = None
    ok: bool = False


class OldBox(rv.Aggregate):
    topic_name = "Box"
    events = RenamedV1

    @rv.applies(RenamedV1)
    def _r(self, e: RenamedV1) -> None:
        pass


class Box(rv.Aggregate):
    topic_name = "Box"
    events = Renamed | Pinged | Counted

    @rv.applies(Renamed)
    def _r(self, e: Renamed) -> None:
        pass

    @rv.applies(Pinged)
    def _p(self, e: Pinged) -> None:
        pass

    @rv.applies(Counted)
    def _c(self, e: Counted) -> None:
        pass


async def _stored(url: str) -> tuple[rv.App, list[Any]]:
    old = rv.App(store=url)
    log1 = old.event_log(OldBox)
    async with old:
        for i in range(3):
            await log1.append(f"b-{i}", [RenamedV1(name=f"Ada {i}")], expected_version=0)
    app = rv.App(store=url)
    log = app.event_log(Box)
    versions = {f"b-{i}": 1 if i < 3 else 0 for i in range(5)}
    async with app:
        for i in range(30):
            meta = rv.Metadata(
                user=f"u{i % 3}" if i % 2 else None,
                tenant="t" if i % 5 == 0 else None,
                correlation_id=f"c{i % 4}" if i % 3 else None,
            )
            events: list[rv.Event] = [
                Counted(n=i, ratio=None if i % 2 else i / 3, ok=i % 4 == 0),
                Pinged(),
            ]
            if i % 7 == 0:
                events.append(Renamed(first=f"F{i}", last="L", tag=f"w{i}"))
            agg = f"b-{i % 5}"
            await log.append(agg, events, expected_version=versions[agg], meta=meta)
            versions[agg] += len(events)
        rows = await app.store.read(log.name, 1, 10_000)
    return app, rows


def _table(rows: list[Any], names: list[str]) -> pa.Table:
    """The rows as a page of stored columns (what a SQLite file's helpers read)."""
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})


def test_arrow_pages_give_the_envelopes_of_their_rows(tmp_path: Path) -> None:
    app, rows = asyncio.run(_stored(f"sqlite:///{tmp_path / 'box.db'}"))
    schema = app.event_log(Box).schema
    names = [*META_NAMES, *(c.name for c in schema.columns)]
    assert len(rows) == 3 + 30 * 2 + 5 and all(len(r) == len(names) for r in rows)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(range(len(rows))), min_size=1, max_size=40))
    def check(picked: list[int]) -> None:
        page = [rows[i] for i in picked]
        table = _table(page, names)
        assert rows_of(table) == page
        want = envelopes_of(schema, "Box", page)
        got = envelopes_of_arrow(schema, "Box", table)
        assert got == want
        for g, w in zip(got, want, strict=True):
            assert type(g) is type(w) and [type(v) for v in g] == [type(v) for v in w]
            assert type(g.event) is type(w.event)

    check()
    # one event type only (the shortcut): the same
    counted = [r for r in rows if r[META_NAMES.index("_type")] == "Counted"]
    table = _table(counted, names)
    assert envelopes_of_arrow(schema, "Box", table) == envelopes_of(schema, "Box", counted)
    assert envelopes_of_arrow(schema, "Box", table.slice(0, 0)) == []
    # upcast: the version-1 rows come back as the current class
    v1 = envelopes_of_arrow(schema, "Box", _table(rows[:3], names))
    assert [e.event for e in v1] == [Renamed(first="Ada", last=str(i)) for i in range(3)]
