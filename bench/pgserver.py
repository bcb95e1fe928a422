"""The PostgreSQL server the ``--store postgres`` workloads run on.

Every measurement gets a fresh database with a unique name (``rvbench_<run>_<n>_...``);
all databases this run created are dropped at the end (``DROP DATABASE ... WITH
(FORCE)``), also when the run fails or is interrupted. Databases of other runs are
never touched. The server is taken from ``PGHOST``/``PGPORT``/``PGUSER`` (default
``127.0.0.1:5432``, user ``postgres``, trust authentication).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg

#: Server-wide settings that decide what a commit costs (reported in BENCHMARKS.md).
SERVER_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "commit_delay",
    "wal_level",
    "shared_buffers",
    "max_wal_size",
    "autovacuum",
)


@dataclass(frozen=True)
class PgDb:
    """One database of the benchmark server."""

    host: str
    port: int
    user: str
    dbname: str

    @property
    def url(self) -> str:
        """The reventless store URL."""
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def conninfo(self) -> str:
        """A libpq connection string (raw psycopg)."""
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    def es_env(self) -> dict[str, str]:
        """The eventsourcing environment (``eventsourcing.postgres``, trust auth: no password)."""
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": "",
        }

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit psycopg connection to this database."""
        return psycopg.connect(self.conninfo, autocommit=True)


class PgServer:
    """Creates and drops this run's databases; ``with PgServer() as server: ...``."""

    def __init__(
        self, host: str | None = None, port: int | None = None, user: str | None = None
    ) -> None:
        self.host = host or os.environ.get("PGHOST") or "127.0.0.1"
        self.port = int(port or os.environ.get("PGPORT") or 5432)
        self.user = user or os.environ.get("PGUSER") or "postgres"
        self.run_id = f"{time.strftime('%m%d%H%M%S')}_{secrets.token_hex(2)}"
        self.created: list[str] = []
        self._admin: psycopg.Connection[Any] | None = None

    def __enter__(self) -> PgServer:
        admin = PgDb(self.host, self.port, self.user, "postgres")
        try:
            self._admin = psycopg.connect(admin.conninfo, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            raise SystemExit(
                f"PostgreSQL is not reachable at {self.host}:{self.port} as {self.user!r}: "
                f"{exc}\nstart it with: bash infra/local/postgres.sh"
            ) from None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.drop_all()
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    @property
    def admin(self) -> psycopg.Connection[Any]:
        if self._admin is None:
            raise RuntimeError("PgServer is not open (use it as a context manager)")
        return self._admin

    def new_db(self, label: str = "") -> PgDb:
        """Create a fresh, empty database with a name unique to this run."""
        tag = re.sub(r"[^a-z0-9_]+", "_", label.lower()).strip("_")
        name = f"rvbench_{self.run_id}_{len(self.created):03d}"
        name = f"{name}_{tag}"[:63] if tag else name
        self.admin.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return PgDb(self.host, self.port, self.user, name)

    def drop_all(self) -> None:
        """Drop every database this run created (terminating leftover connections)."""
        if self._admin is None:
            return
        while self.created:
            name = self.created.pop()
            try:
                self._admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:  # keep dropping the others
                print(f"warning: could not drop database {name}: {exc}", flush=True)

    def checkpoint(self) -> None:
        """Flush dirty buffers now, so that no measurement pays for an earlier one's."""
        self.admin.execute("CHECKPOINT")

    def settings(self) -> dict[str, str]:
        """``SHOW`` of the server-wide settings that govern commit durability and cost."""
        return {s: str(self.admin.execute(f"SHOW {s}").fetchone()[0]) for s in SERVER_SETTINGS}  # type: ignore[index]
