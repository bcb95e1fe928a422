"""One Spark session for the whole test run (starting one takes seconds)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import unavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark_ready() -> None:
    """Java and pyspark are there, and Spark's Python workers find the repo's modules (for
    a test whose Spark runs in processes of its own: no session in this one)."""
    if shutil.which("java") is None:
        unavailable("Java is not installed (make test installs it: infra/local/java.sh)")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("pyspark is not installed (pip install -e '.[spark]')")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers import the handlers' modules (examples.*, tests.*) from the repo.
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


@pytest.fixture(scope="session")
def spark(spark_ready: None) -> Iterator[Any]:
    """A local[2] session shared by every Spark test (few shuffle partitions)."""
    from reventless.spark import session

    s = session("local[2]", conf={"spark.sql.shuffle.partitions": "2"})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def standalone(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One loopback standalone cluster (a master and two workers, each its own JVM) shared
    by the cluster tests: each starts its own application on it."""
    from reventless.spark.standalone import LocalCluster

    workdir = tmp_path_factory.mktemp("cluster")
    with LocalCluster(workers=2, workdir=workdir, pythonpath=str(ROOT)) as cluster:
        assert cluster.alive_workers() == 2
        yield cluster


def executors(cluster: Any) -> set[Path]:
    """The executors the cluster's workers have run so far (one directory each)."""
    return {p for w in ("w0", "w1") for p in (cluster.workdir / w).glob("app-*/*")}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Segments and staging files of one test."""
    return tmp_path / "spark"
