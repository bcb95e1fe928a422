"""Properties of the log under random interleavings of commands, clashes and rollbacks."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

import reventless as rv
from reventless.testing.store_suite import CDC_SCHEMA, cdc_table
from tests.model import Counter, Increment, Incremented, ResetCounter

step = st.one_of(
    st.tuples(st.just("cmd"), st.integers(0, 3), st.integers(-1, 3)),  # by <= 0 is rejected
    st.tuples(st.just("reset"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("stale"), st.integers(0, 3), st.integers(1, 3)),  # clashing append
    st.tuples(st.just("bad_batch"), st.just(0), st.integers(1, 5)),  # schema mismatch
    st.tuples(st.just("cdc"), st.just(0), st.integers(1, 5)),
    st.tuples(st.just("burst"), st.integers(0, 3), st.integers(2, 6)),  # concurrent writers
)


@given(st.lists(step, min_size=1, max_size=40))
def test_offsets_gapless_monotonic_and_versions_unique(steps: list[tuple[str, int, int]]) -> None:
    asyncio.run(_run(steps))


async def _run(steps: list[tuple[str, int, int]]) -> None:
    app = rv.App(store="sqlite://")
    log = app.event_log(Counter)
    cdc = app.topic("cdc", schema=CDC_SCHEMA)
    expected_events = 0
    expected_cdc = 0
    async with app:
        for kind, agg, n in steps:
            aid = f"c-{agg}"
            if kind == "cmd":
                try:
                    await log.execute(aid, Increment(by=n))
                    expected_events += 1
                except rv.Rejected:
                    assert n <= 0
            elif kind == "reset":
                await log.execute(aid, ResetCounter())
                expected_events += 2
            elif kind == "stale":
                current = (await log.load(aid)).version
                try:
                    await log.append(aid, [Incremented()] * n, expected_version=max(0, current - 1))
                    assert current == 0
                    expected_events += n
                except rv.ConcurrencyError:
                    assert current > 0
            elif kind == "bad_batch":
                bad = pa.table({"op": ["x"] * n, "ts_ms": ["not a number"] * n})
                try:
                    await cdc.publish(bad)
                    raise AssertionError("a bad batch was accepted")
                except rv.SchemaMismatchError:
                    pass
            elif kind == "cdc":
                await cdc.publish(cdc_table(n))
                expected_cdc += n
            elif kind == "burst":
                results = await asyncio.gather(
                    *(log.execute(aid, Increment()) for _ in range(n)), return_exceptions=True
                )
                assert not [r for r in results if isinstance(r, BaseException)]
                expected_events += n
        rows = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                f"SELECT _offset, _aggregate_id, _version FROM {app.store.table_of('Counter')} "
                "ORDER BY _offset"
            ).all()
        )
        assert [r[0] for r in rows] == list(range(1, expected_events + 1))
        per_agg: dict[str, list[int]] = defaultdict(list)
        for _, a, v in rows:
            per_agg[a].append(v)
        for versions in per_agg.values():
            assert versions == list(range(1, len(versions) + 1))
        cdc_offsets = await app.store.db.read(
            lambda c: c.exec_driver_sql(
                f"SELECT _offset FROM {app.store.table_of('cdc')} ORDER BY _offset"
            ).all()
        )
        assert [o for (o,) in cdc_offsets] == list(range(1, expected_cdc + 1))
        assert await log.head() == expected_events
