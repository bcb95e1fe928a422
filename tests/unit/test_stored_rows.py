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


def test_event_rows_are_stored_rows_built_in_one_pass() -> None:
    """``event_rows`` (the per-command hot path) lays the columns out as ``stored_rows``."""
    import reventless as rv
    from reventless.topicdef import event_rows

    class Moved(rv.Event):
        x: int
        note: str | None = None

    class Parked(rv.Event):
        pass

    events: list[rv.Event] = [Moved(x=1), Parked(), Moved(x=3, note="n")]
    encoders = {
        "Moved": lambda e: (e.x, e.note),
        "Parked": lambda e: (None, None),
    }
    ids = ["id-1", "id-2", "id-3"]
    context = ("corr", "cause", "ada", "svc", "10.0.0.1", "acme", "00-trace")
    fast = event_rows(99, ids, context, "agg-1", 4, 2, events, encoders)
    entries = [
        (
            "agg-1",
            5 + i,
            type(e).event_type,
            type(e).schema_version,
            2,
            encoders[type(e).event_type](e),
        )
        for i, e in enumerate(events)
    ]
    assert fast == stored_rows(99, ids, context, entries)
    assert [r[VERSION_AT - 1] for r in fast] == [5, 6, 7]  # (rows lack _offset)
