"""A private PostgreSQL server for fault tests: stopped, crashed and restarted at will.

The shared server the other ``postgres`` tests use must never be stopped, so a fault test
runs its own: ``initdb`` into a temporary directory, listening on a free loopback port
with its unix socket in that directory. PostgreSQL refuses to run as root; when the tests
do, the server runs as the ``postgres`` OS user (``runuser``) and owns the directory.

Binaries come from ``$PG_BIN`` (a ``bin`` directory), ``pg_config --bindir`` or Debian's
``/usr/lib/postgresql/<version>/bin``; when none is found the test skips, and under
``CI=true`` fails (``tests.services.unavailable``).

Example::

    with PrivatePostgres.create() as pg:
        url = pg.create_database("shop")   # postgresql+psycopg://...
        pg.stop("immediate")                # a crash: no shutdown checkpoint
        pg.start()                          # crash recovery, then accepting connections
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Literal

import pytest

from tests.services import free_port, unavailable

StopMode = Literal["smart", "fast", "immediate"]


def pg_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (newest version)."""
    candidates: list[str] = []
    if os.environ.get("PG_BIN"):
        candidates.append(os.environ["PG_BIN"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            )
            candidates.append(out.stdout.strip())

    def version(path: str) -> float:
        with contextlib.suppress(ValueError):
            return float(Path(path).parent.name)
        return 0.0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for c in candidates:
        if all(os.access(Path(c) / b, os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return Path(c)
    unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")


class PrivatePostgres:
    """One PostgreSQL server of its own on 127.0.0.1; ``stop``/``start`` keep port and data."""

    def __init__(self, bindir: Path, base: Path, port: int | None = None) -> None:
        self.bindir = bindir
        self.base = base
        self.data = base / "data"
        self.socket_dir = base / "sock"
        self.log_path = base / "server.log"
        self.port = port or free_port()
        # PostgreSQL will not run as root: then as the postgres OS user, owning ``base``
        self.run_as = "postgres" if os.geteuid() == 0 else None

    @classmethod
    def create(cls) -> PrivatePostgres:
        """A fresh cluster (``initdb``) in a new temporary directory, started."""
        bindir = pg_bindir()
        # not pytest's tmp_path: its parents are private to root, the server user must
        # be able to reach its own directory
        base = Path(tempfile.mkdtemp(prefix="rv-pg-"))
        server = cls(bindir, base)
        try:
            server.init()
            server.start()
        except BaseException:
            server.destroy()
            raise
        return server

    def _cmd(self, *args: str) -> list[str]:
        if self.run_as is None:
            return list(args)
        return ["runuser", "-u", self.run_as, "--", *args]

    def _run(self, *args: str, timeout: float = 60.0) -> None:
        out = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args[:2])} failed ({out.returncode}): {out.stderr or out.stdout}"
                f"\n{self.tail()}"
            )

    def tail(self, chars: int = 2000) -> str:
        """The end of the server's log (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def init(self) -> None:
        """``initdb``: trust authentication, loopback only, a socket in the temp dir."""
        self.socket_dir.mkdir(parents=True)
        if self.run_as is not None:
            user = pwd.getpwnam(self.run_as)
            for p in (self.base, self.socket_dir):
                os.chown(p, user.pw_uid, user.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        # fsync off: a server crash (immediate stop) loses no committed work as long as
        # the machine stays up (the WAL is written before a commit is acknowledged)
        conf = (
            f"port = {self.port}\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.socket_dir}'\n"
            "fsync = off\n"
            "full_page_writes = off\n"
            "shared_buffers = 32MB\n"
            "max_connections = 60\n"
        )
        with open(self.data / "postgresql.auto.conf", "a") as f:
            f.write(conf)

    @property
    def admin_dsn(self) -> str:
        """A libpq connection string for the ``postgres`` database."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def url(self, database: str = "postgres") -> str:
        """A store URL (``postgresql+psycopg://``) on ``database`` of this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "rv") -> str:
        """A fresh database; returns its store URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def start(self, timeout: float = 60.0) -> None:
        """Start (after a crash: recover) and wait until it accepts connections."""
        self._run(
            str(self.bindir / "pg_ctl"),
            "start",
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            str(int(timeout)),
            timeout=timeout + 10,
        )
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll until a connection and a query succeed (``pg_ctl -w`` already waits for the
        postmaster; this also covers the end of crash recovery)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PostgreSQL did not come up:\n{self.tail()}") from None
                time.sleep(0.05)

    def stop(self, mode: StopMode = "fast", timeout: float = 60.0) -> None:
        """``fast``: roll back sessions, checkpoint, exit; ``immediate``: kill every server
        process at once, no checkpoint (like a crash; the next start recovers)."""
        self._run(
            str(self.bindir / "pg_ctl"),
            "stop",
            "-D",
            str(self.data),
            "-m",
            mode,
            "-w",
            "-t",
            str(int(timeout)),
            timeout=timeout + 10,
        )

    def restart(self, mode: StopMode = "fast") -> None:
        """``stop(mode)`` then ``start()``."""
        self.stop(mode)
        self.start()

    @property
    def running(self) -> bool:
        """Whether the postmaster runs (``pg_ctl status``)."""
        out = subprocess.run(
            self._cmd(str(self.bindir / "pg_ctl"), "status", "-D", str(self.data)),
            capture_output=True,
        )
        return out.returncode == 0

    def destroy(self) -> None:
        """Stop the server if it runs (immediately) and delete its directory."""
        if self.data.exists() and self.running:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


@pytest.fixture(scope="module")
def private_pg() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL server for a test module (fault tests stop and restart it)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    with PrivatePostgres.create() as server:
        yield server
