"""PostgreSQL's Arrow reader runs the ADBC driver in the store's process, so the driver
must fail a read whose connection is gone with an exception the reader can catch (its
page then comes through rows), not abort the process: ``adbc-driver-postgresql`` 1.8.0
to 1.10.0 threw a C++ ``std::logic_error`` there (``basic_string::_S_construct null not
valid``) and the process ended (SIGABRT). ``pyproject.toml`` asks for 1.11 or later; this
holds the installed driver to it. The read runs in a child process, so an abort fails
the test instead of taking the test run down."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.postgres

_CHILD = """
import sys
import adbc_driver_postgresql
import psycopg
from reventless.store.arrowread import _Reader

reader = _Reader(adbc_driver_postgresql, sys.argv[1])
pid = reader.read("SELECT pg_backend_pid() AS pid").column(0)[0].as_py()
with psycopg.connect(sys.argv[1], autocommit=True) as admin:
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
try:
    reader.read("SELECT 1 AS one")
except Exception as exc:
    print("raised", type(exc).__name__)
else:
    print("read on a terminated connection")
"""


def test_a_read_on_a_lost_connection_raises_and_the_process_lives(pg_database: str) -> None:
    uri = pg_database.replace("postgresql+psycopg://", "postgresql://")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, uri], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip().startswith("raised"), done.stdout
