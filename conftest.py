"""Shared fixtures: every store-backed test body runs against each store URL."""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.moto_server import moto_server, sns_sqs_url  # noqa: F401  (fixtures)
from tests.nats_server import nats_server, nats_url  # noqa: F401  (fixtures)
from tests.services import unavailable

# pytest-xdist's workers (``make test`` runs two) get COLUMNS=80 and LINES=24 from execnet:
# the CLI's tables would fold at 80 columns there and nowhere else.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

# Spark's test defaults (JIT and collector settings of short-lived JVMs): every driver a
# test starts reads them, in this process or in one of its own (spark-submit reads
# SPARK_CONF_DIR). A run may point it elsewhere.
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "tests" / "spark" / "conf"))
# A Python worker of Spark's gives its JVM 15 s to answer on the socket it connects to; on
# a loaded machine (a run with three xdist workers on two cores) the JVM was seen to take
# longer (CANNOT_OPEN_SOCKET ... timed out).
os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "90")

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
settings.register_profile(
    "ci",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

STORE_KINDS = ["sqlite-file", "sqlite-memory"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist (``make test`` runs two workers, ``--dist loadgroup``): the tests
    that use the shared Spark session (or the loopback cluster) run on one worker, instead
    of a session's JVM (and a cluster of three) in each; those whose Spark runs in
    processes of their own (CLI commands, killed drivers) go to either. First among the
    hooks: xdist's own reads the group marker to suffix the node ids (``...@spark``)
    that its scheduler groups by, so a marker added after it groups nothing."""
    for item in items:
        if set(getattr(item, "fixturenames", ())) & {"spark", "standalone"}:
            item.add_marker(pytest.mark.xdist_group("spark"))


def pytest_exception_interact(node: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """When pytest-timeout stops a hung test, print where each pending asyncio task waits:
    the timeout's own traceback only shows the event loop's ``select``."""
    if call.excinfo is None or "from pytest-timeout" not in str(call.excinfo.value):
        return
    gc.unfreeze()  # App start froze what existed then (AppOptions.gc_freeze): see it all
    tasks = [o for o in gc.get_objects() if isinstance(o, asyncio.Task) and not o.done()]
    print(f"\n+++ {node.nodeid}: {len(tasks)} pending asyncio tasks +++", file=sys.stderr)
    for task in tasks:
        print(f"--- {task.get_name()}", file=sys.stderr)
        aw: object = task.get_coro()
        while aw is not None:  # the whole await chain, not only the outer coroutine
            frame = getattr(aw, "cr_frame", None) or getattr(aw, "ag_frame", None)
            if frame is not None:
                code = frame.f_code
                print(f"  {code.co_filename}:{frame.f_lineno} {code.co_name}", file=sys.stderr)
            aw = getattr(aw, "cr_await", None) or getattr(aw, "ag_await", None)
    print("+++ threads +++", file=sys.stderr)
    sys.stderr.flush()
    faulthandler.dump_traceback(all_threads=True)


def make_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite-file":
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "sqlite-memory":
        return "sqlite://"
    raise ValueError(kind)


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL of each kind (file stores use a per-test temp dir)."""
    yield make_url(request.param, tmp_path)


#: Every store kind, PostgreSQL included (``any_url``).
ALL_KINDS = [*STORE_KINDS, pytest.param("postgres", marks=pytest.mark.postgres)]
#: The kinds several Apps or processes can open at once (``shared_url``).
SHARED_KINDS = ["sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]


def url_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL of ``kind``: ``make_url``'s, or a PostgreSQL schema of its own."""
    if kind == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return make_url(kind, tmp_path)


@pytest.fixture(params=ALL_KINDS)
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL of every kind: a SQLite file, SQLite in memory, a PostgreSQL schema."""
    return url_of(request.param, request, tmp_path)


@pytest.fixture(params=SHARED_KINDS)
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store that several Apps or processes open at once: a SQLite file or a
    PostgreSQL schema."""
    return url_of(request.param, request, tmp_path)


@pytest.fixture
def file_url(tmp_path: Path) -> str:
    """A fresh SQLite file store URL."""
    return f"sqlite:///{tmp_path / 'store.db'}"


# -- PostgreSQL --------------------------------------------------------------------------------

PG_ADMIN = os.environ.get(
    "REVENTLESS_TEST_PG", "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run (dropped at the end)."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    name = f"rv_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL is not reachable ({PG_ADMIN}): {exc}")
    info = psycopg.conninfo.conninfo_to_dict(PG_ADMIN)
    yield (
        f"postgresql+psycopg://{info.get('user', 'postgres')}@{info.get('host', '127.0.0.1')}:"
        f"{info.get('port', 5432)}/{name}"
    )
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A store URL on its own schema of the run's database: each test starts empty."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    plain = pg_database.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{pg_database}?options=-csearch_path%3D{schema}"
