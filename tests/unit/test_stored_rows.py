"""The one builder of the metadata columns, and the named column indices that read them."""

from __future__ import annotations

import pytest

from reventless.codec import (
    AGGREGATE_AT,
    CORRELATION_AT,
    FIELDS_AT,
    META_NAMES,
    MSG_ID_AT,
    OFFSET_AT,
    PARTITION_AT,
    PRODUCED_AT_AT,
    ROW_IDX_AT,
    SCHEMA_VERSION_AT,
    TENANT_AT,
    TRACE_AT,
    TYPE_AT,
    VERSION_AT,
)
from reventless.errors import StoreError
from reventless.store import open_store, require_sql
from reventless.topicdef import stored_rows


def test_indices_name_their_columns() -> None:
    named = {
        "_offset": OFFSET_AT,
        "_row_idx": ROW_IDX_AT,
        "_produced_at": PRODUCED_AT_AT,
        "_aggregate_id": AGGREGATE_AT,
        "_version": VERSION_AT,
        "_type": TYPE_AT,
        "_schema_version": SCHEMA_VERSION_AT,
        "_msg_id": MSG_ID_AT,
        "_correlation_id": CORRELATION_AT,
        "_tenant": TENANT_AT,
        "_partition": PARTITION_AT,
        "_trace": TRACE_AT,
    }
    assert {META_NAMES[i]: i for i in named.values()} == named
    assert len(META_NAMES) == FIELDS_AT


def test_stored_rows_put_each_value_in_its_column() -> None:
    context = ("corr", "cause", "ada", "shop", "10.0.0.1", "acme", "00-trace")
    rows = stored_rows(
        1_700_000_000_000_000,
        ["m-1", "m-2"],
        context,
        [("a-1", 3, "Opened", 2, 5, ("x", 1)), (None, None, "Row", 1, 0, ("y", 2))],
    )
    assert len(rows) == 2
    # A request row is a stored row without its offset (the store puts it in front).
    stored = [(41 + i, *r) for i, r in enumerate(rows)]
    first = dict(zip(META_NAMES, stored[0], strict=False))
    assert (first["_offset"], first["_row_idx"]) == (41, 0)
    assert first["_produced_at"] == 1_700_000_000_000_000
    assert (first["_aggregate_id"], first["_version"], first["_type"]) == ("a-1", 3, "Opened")
    assert (first["_schema_version"], first["_msg_id"], first["_partition"]) == (2, "m-1", 5)
    assert tuple(stored[0][CORRELATION_AT : TENANT_AT + 1]) == context[:6]
    assert stored[0][TRACE_AT] == "00-trace"
    assert stored[0][FIELDS_AT:] == ("x", 1)
    assert stored[1][ROW_IDX_AT] == 1 and stored[1][MSG_ID_AT] == "m-2"
    assert stored[1][AGGREGATE_AT] is None and stored[1][FIELDS_AT:] == ("y", 2)


def test_require_sql_names_what_needs_it() -> None:
    store = open_store("sqlite://")
    assert require_sql(store, "x") is store

    class Other:
        pass

    with pytest.raises(StoreError, match="Spark needs the SQL store, not Other"):
        require_sql(Other(), "Spark")  # type: ignore[arg-type]


@pytest.mark.parametrize("correlation", ["corr", None])
def test_command_rows_are_each_commands_stored_rows(correlation: str | None) -> None:
    """``command_rows`` (the per-command and ``execute_many`` hot path) lays the columns
    out as ``stored_rows`` would for each command on its own: ``_row_idx`` and versions
    from each command's start, its ids in order, and its rows correlated by the context's
    correlation id or else by the command's first id."""
    import reventless as rv
    from reventless.topicdef import command_rows

    class Moved(rv.Event):
        x: int
        note: str | None = None

    class Parked(rv.Event):
        pass

    encoders = {
        "Moved": lambda e: (e.x, e.note),
        "Parked": lambda e: (None, None),
    }
    commands: list[tuple[str, int, int, list[rv.Event]]] = [
        ("agg-1", 4, 2, [Moved(x=1), Parked(), Moved(x=3, note="n")]),
        ("agg-2", 0, 1, [Parked()]),
        ("agg-1", 7, 2, [Moved(x=8)]),
        ("agg-3", 9, 0, [Moved(x=2), Moved(x=5)]),
    ]
    ids = [f"id-{i}" for i in range(7)]
    context = (correlation, "cause", "ada", "svc", "10.0.0.1", "acme", "00-trace")
    fast = command_rows(99, iter(ids), context, commands, encoders)
    expected: list[tuple[object, ...]] = []
    at = 0
    for aggregate_id, version, partition, events in commands:
        mine = ids[at : at + len(events)]
        entries = [
            (
                aggregate_id,
                version + 1 + i,
                type(e).event_type,
                type(e).schema_version,
                partition,
                encoders[type(e).event_type](e),
            )
            for i, e in enumerate(events)
        ]
        own = (correlation or mine[0], *context[1:])
        expected += stored_rows(99, mine, own, entries)
        at += len(events)
    assert fast == expected
    assert [r[VERSION_AT - 1] for r in fast] == [5, 6, 7, 1, 8, 10, 11]  # (no _offset)
    assert [r[ROW_IDX_AT - 1] for r in fast] == [0, 1, 2, 0, 0, 0, 1]
    assert [r[CORRELATION_AT - 1] for r in fast] == (
        [correlation] * 7 if correlation else ["id-0"] * 3 + ["id-3", "id-4", "id-5", "id-5"]
    )
