"""``unfold`` puts a page read with folded columns back together: each folded column holds
its one value (NULL or an integer) in every row, typed as the whole read gave it, and a
page whose flag shows another value is refused. Pages of one size share their constant
columns (Arrow arrays are immutable), so the second page's equal the first's."""

from __future__ import annotations

import pyarrow as pa

from reventless.store.arrowread import FLAG, Fold, unfold

NAMES = ["_offset", "_trace", "_row_idx", "by"]
FOLDS = {"_trace": Fold(None, pa.string()), "_row_idx": Fold(0, pa.int32())}


def folded_page(offsets: list[int], flags: list[int | None]) -> pa.Table:
    return pa.table(
        {
            "_offset": pa.array(offsets, pa.int64()),
            "by": pa.array([o * 10 for o in offsets], pa.int64()),
            FLAG: pa.array(flags, pa.int64()),
        }
    )


def test_folded_columns_come_back_with_their_values_and_types() -> None:
    whole = unfold(folded_page([1, 2, 3], [None, None, None]), NAMES, FOLDS)
    assert whole is not None
    assert whole.column_names == NAMES
    assert whole.schema.field("_trace").type == pa.string()
    assert whole.schema.field("_row_idx").type == pa.int32()
    assert whole.to_pylist() == [
        {"_offset": o, "_trace": None, "_row_idx": 0, "by": o * 10} for o in (1, 2, 3)
    ]
    again = unfold(folded_page([4, 5, 6], [None, None, None]), NAMES, FOLDS)
    assert again is not None
    assert again.column("_row_idx").equals(whole.column("_row_idx"))
    assert again.column("_offset").to_pylist() == [4, 5, 6]


def test_a_page_whose_flag_is_set_is_read_again_whole() -> None:
    assert unfold(folded_page([1, 2], [None, 1]), NAMES, FOLDS) is None
