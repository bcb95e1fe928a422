"""The store's group commits take queued runs of requests (``sql.take_group``) exactly
as taking the requests one at a time would: up to the request limit, none more once the
row limit is reached, in order, each outcome back to its own sink (a property test
against that one-at-a-time rule, with small limits)."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reventless.store import sql
from reventless.store.append import AppendRequest

# a queue: runs (an append's one request or an append_many's several), each request's rows
queues = st.lists(st.lists(st.integers(1, 7), min_size=1, max_size=9), max_size=8)


def one_at_a_time(
    flat: list[tuple[int, int]], limit: int, row_limit: int
) -> list[list[tuple[int, int]]]:
    """Groups of (run, rows) taken request by request, as the store once did."""
    groups = []
    while flat:
        take = rows = 0
        while take < min(len(flat), limit) and (not take or rows < row_limit):
            rows += flat[take][1]
            take += 1
        groups.append(flat[:take])
        flat = flat[take:]
    return groups


@settings(max_examples=300, deadline=None)
@given(runs=queues, limit=st.integers(1, 12), row_limit=st.integers(1, 30))
def test_groups_are_those_of_one_request_at_a_time(
    runs: list[list[int]], limit: int, row_limit: int
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sql, "_MAX_GROUP", limit)
        mp.setattr(sql, "_MAX_GROUP_ROWS", row_limit)
        pending: deque[Any] = deque()
        flat = []
        for k, sizes in enumerate(runs):
            reqs = [AppendRequest(f"t{k}", [(i,)] * n, f"a{k}-{i}", 0) for i, n in enumerate(sizes)]
            pending.append((reqs, f"sink{k}", sum(sizes)))
            flat += [(k, n) for n in sizes]
        got = []
        while pending:
            reqs, sinks = sql.take_group(pending)
            assert sum(c for _, c in sinks) == len(reqs)
            expanded = [s for s, c in sinks for _ in range(c)]  # each request's sink
            assert expanded == [f"sink{r.topic[1:]}" for r in reqs]
            got.append([(int(r.topic[1:]), len(r.rows)) for r in reqs])
            for reqs_left, _, rows_left in pending:  # a run left behind counts its rows
                assert rows_left == sum(len(r.rows) for r in reqs_left)
        assert got == one_at_a_time(flat, limit, row_limit)
