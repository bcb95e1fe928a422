"""A Spark rebuild's span and its stages' spans and durations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reventless import telemetry
from reventless.spark import rebuild
from tests.spark.conftest import spark, spark_ready  # noqa: F401  (the session fixture)
from tests.telemetry.conftest import _PROVIDER, parent_of, points
from tests.telemetry.model import Counter, Increment, chain_app, totals

pytestmark = pytest.mark.spark


async def test_a_rebuild_has_a_span_per_stage(
    tmp_path: Path,
    spark: Any,  # noqa: F811
    spans: InMemorySpanExporter,
) -> None:
    reader = InMemoryMetricReader()
    telemetry.configure(tracer_provider=_PROVIDER, meter_provider=MeterProvider([reader]))
    app = chain_app(f"sqlite:///{tmp_path / 'a.db'}", mapper=False)
    async with app:
        await app.event_log(Counter).execute_many([(f"c-{i}", Increment(by=1)) for i in range(5)])
        await app.settle()
        said: list[str] = []
        await rebuild(totals, app, spark=spark, workdir=tmp_path / "w", progress=said.append)
    assert said  # the caller's progress still hears every message
    finished = spans.get_finished_spans()
    [whole] = [s for s in finished if s.name == "rebuild counter_totals"]
    stages = [s for s in finished if s.name.startswith("rebuild counter_totals ")]
    names = [s.attributes["reventless.stage"] for s in stages]  # type: ignore[index]
    assert names[0] == "reading" and "swapping" in names, names
    assert all(parent_of(s) == whole.context.span_id for s in stages)
    durations = points(reader)["reventless.rebuild.duration"]
    assert {a["reventless.stage"] for a, _ in durations} == set(names)
