"""A streaming query's failure reaches the caller as the reventless error inside Spark's
wrapping (its text), not as Spark's exception (no Spark needed: Spark's errors carry the
Python worker's traceback text)."""

from __future__ import annotations

import pytest

from reventless.errors import (
    SchemaMismatchError,
    StreamError,
    StreamFencedError,
    TopicNotFoundError,
)
from reventless.spark.stream import stream_error


def spark_text(inner: str) -> RuntimeError:
    return RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: "
        "An exception was thrown from the Python worker. Traceback (most recent call last):\n"
        '  File "ds_log.py", line 9, in read\n'
        f"{inner}\n"
    )


@pytest.mark.parametrize(
    ("inner", "cls", "needle"),
    [
        ("reventless.errors.SchemaMismatchError: topic Order grew columns", SchemaMismatchError,
         "grew columns"),
        ("reventless.errors.TopicNotFoundError: no topic 'Nope'", TopicNotFoundError, "Nope"),
        ("reventless.errors.StreamFencedError: checkpoints moved", StreamFencedError, "moved"),
        ("reventless.errors.ResnapshotRequiredError: topic Order is retained from 101",
         StreamError, "resnapshot required: topic Order"),
    ],
)  # fmt: skip
def test_the_reventless_error_inside_is_raised(
    inner: str, cls: type[Exception], needle: str
) -> None:
    got = stream_error(spark_text(inner))
    assert type(got) is cls and needle in str(got)


def test_another_error_stays_itself() -> None:
    exc = RuntimeError("java.lang.OutOfMemoryError")
    assert stream_error(exc) is exc
