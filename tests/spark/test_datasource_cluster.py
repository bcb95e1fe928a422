"""The ``reventless`` data source on a Spark standalone cluster (one master, two workers on
loopback): a batch read and a capped stream run their tasks in both workers' executors.

A process has one Spark driver (the shared session is local[2]), so the cluster's driver
is this module run as a child process (``python -m tests.spark.test_datasource_cluster``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from tests.spark.conftest import ROOT, executors
from tests.spark.model import Record
from tests.spark.test_log import fill

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def drive(url: str, master: str, checkpoint: str) -> dict[str, Any]:
    """The child: read the log batch and streaming on ``master``; what it saw."""
    from reventless.spark import session

    spark = session(master)
    reader = spark.read.format("reventless").option("store", url).option("topic", "Record")
    df = reader.option("eventsPerPartition", 10).load()
    batch = sorted(r._offset for r in df.select("_offset").collect())
    tasks = df.rdd.getNumPartitions()
    sizes: list[int] = []
    offsets: list[int] = []

    def sink(frame: Any, _: int) -> None:
        got = [r._offset for r in frame.select("_offset").collect()]
        sizes.append(len(got))
        offsets.extend(got)

    stream = spark.readStream.format("reventless").option("store", url)
    stream = stream.option("topic", "Record").option("maxEventsPerTrigger", 15).load()
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    query.trigger(availableNow=True).start().awaitTermination()
    spark.stop()
    return {"tasks": tasks, "batch": batch, "sizes": sizes, "stream": offsets}


async def _fill(url: str) -> None:
    app = rv.App(store=url)
    log = app.event_log(Record)
    async with app:
        await fill(log, 0, 20)


def test_batch_and_stream_on_a_standalone_cluster(standalone: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    asyncio.run(_fill(url))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(ROOT))
    before = executors(standalone)
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.test_datasource_cluster", url, standalone.master,
         str(tmp_path / "checkpoint")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(executors(standalone) - before) >= 2  # both workers ran an executor
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["tasks"] == 4 and seen["batch"] == list(range(1, 41))
    assert seen["sizes"] == [15, 15, 10] and seen["stream"] == list(range(1, 41))


if __name__ == "__main__":
    print(json.dumps(drive(*sys.argv[1:4])))
