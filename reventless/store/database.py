"""The SQL connection layer shared by the event store, checkpoints and read models.

A URL is the whole configuration (``sqlite:///shop.db``, ``sqlite://`` for memory,
``postgresql+psycopg://...``). The core is async; SQLAlchemy runs in worker
threads: one writer thread (writes are serialised here anyway, and grouping them
lets many commands share one commit) and a small reader pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from ..errors import StoreError, StoreFullError
from ..urls import redact_url

T = TypeVar("T")
log = logging.getLogger("reventless.store")
#: The advisory lock class of ``Database.serialize_ddl`` ("rvdd" as an integer); the
#: second key is the schema's hash, so stores in other schemas do not wait on each other.
_DDL_LOCK = 0x72766464
#: How long DDL waits for another process's DDL (or a table lock) before it fails
#: instead of hanging: a stuck peer becomes an error at start-up.
_DDL_LOCK_TIMEOUT = "120s"

_SYNC_MODES = {"OFF", "NORMAL", "FULL", "EXTRA"}

# Writers of one SQLite file in one process take turns here instead of in SQLite's
# busy handler: several threads spinning on the file lock were seen to starve the
# lock holder. Other processes are still arbitrated by SQLite (busy_timeout).
_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


#: Values ``sqlite3`` binds without asking the adapter protocol first, as they bind anyway.
#: It binds int, float, str and bytes directly; any other value, None and bool included,
#: is offered to adapters: a registered one is found by one dict lookup, but with none the
#: module looks for ``__adapt__`` and ``__conform__``, and each miss raises and clears an
#: AttributeError with a formatted message (about 1,200 instructions per value, callgrind).
#: Every stored row has several NULL metadata columns (causation, user, ip, tenant,
#: trace...), so that was about 40% of binding a row. These adapters return what would
#: have been bound: None binds NULL, a bool the integer 0 or 1, exactly as before.
_BIND_AS_IS: tuple[tuple[type[Any], Callable[[Any], Any]], ...] = (
    (type(None), {}.get),  # {}.get(None) is None: a C call, no Python frame
    (bool, int),
)


def _fast_sqlite_binding() -> None:
    """Register ``_BIND_AS_IS`` with ``sqlite3`` (module-wide: its adapters are global),
    leaving an adapter someone else registered for those types in place."""
    for kind, adapter in _BIND_AS_IS:
        if (kind, sqlite3.PrepareProtocol) not in sqlite3.adapters:
            sqlite3.register_adapter(kind, adapter)


def _timeout(raw: object, default: float | None) -> float | None:
    """The ``timeout`` URL option in seconds (``0``: no limit), else ``default``."""
    if raw is None:
        return default
    try:
        seconds = float(str(raw))
    except ValueError:
        raise StoreError(f"timeout must be a number of seconds, got {raw!r}") from None
    return seconds if seconds > 0 else None


def _max_pages(raw: object, default: int | None) -> int | None:
    """The ``max_page_count`` URL option (a positive integer), else ``default``."""
    if raw is None:
        return default
    try:
        pages = int(str(raw))
    except ValueError:
        pages = 0
    if pages <= 0:
        raise StoreError(f"max_page_count must be a positive integer, got {raw!r}")
    return pages


#: SQLite's result code of a full disk or a database at ``max_page_count``; PostgreSQL's
#: SQLSTATE ``disk_full``.
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"


def write_error(exc: BaseException) -> StoreError:
    """The typed error of a failed write (``exc``: the driver's or SQLAlchemy's):
    ``StoreFullError`` when the disk or SQLite's ``max_page_count`` is full."""
    orig = getattr(exc, "orig", None) or exc
    code = getattr(orig, "sqlite_errorcode", None)
    if (isinstance(code, int) and code & 0xFF == _SQLITE_FULL) or (
        getattr(orig, "sqlstate", None) == _PG_DISK_FULL
    ):
        return StoreFullError(f"store write failed, the store is full: {orig}")
    return StoreError(f"store write failed: {orig}")


def loop_is_alone(own: int = 0) -> bool:
    """Whether no other callback than the caller's ``own`` is ready to run on the running
    loop (asyncio's own loop keeps them in ``_ready``; another loop: assume company), so a
    write made on the loop's thread delays no one: a lone append groups with nothing, and
    a collector's checkpoint commit holds up no other task."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is not None and len(ready) <= own


async def alone_soon(turns: int = 4) -> bool:
    """``loop_is_alone()`` within ``turns`` turns of the loop: what is ready now runs
    first (in a catch-up, the read ahead's completion and the steps it wakes, four deep),
    and whatever it makes ready in turn."""
    for _ in range(turns):
        if loop_is_alone():
            return True
        await asyncio.sleep(0)
    return loop_is_alone()


def _sorting_in_files(conn: Connection, fn: Callable[[Connection], T]) -> T:
    """``fn`` in a transaction of ``conn`` (a SQLite file's writer) whose temporary data
    goes to files: the writer keeps it in memory (``temp_store=MEMORY``, see
    ``Database._make_engine``), where an index built over millions of rows would sort
    them all (2M rows of 100 bytes: 290 MB against 18). The setting can change only
    between transactions."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA temp_store=FILE")
    try:
        with conn.begin():
            return fn(conn)
    finally:
        with contextlib.suppress(sqlite3.Error):  # (a broken connection is opened again)
            raw.execute("PRAGMA temp_store=MEMORY")


def _file_lock(path: str) -> threading.Lock:
    key = os.path.realpath(path)
    with _file_locks_guard:
        return _file_locks.setdefault(key, threading.Lock())


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Keyword options of a store; URL query parameters override them.

    ``synchronous`` is SQLite's durability (``FULL`` by default: every commit is
    fsynced, the same durability the ``eventsourcing`` library uses).
    ``inline_writes``: on a SQLite file, an append that has no company, and a group
    commit of up to 256 events or a read model's page with nothing else ready to run
    on the loop, run on the event loop's thread instead of hopping to the writer thread
    (lower latency and less CPU; the loop is blocked for that one commit).
    ``timeout``: on PostgreSQL, the seconds connecting may take (libpq's
    ``connect_timeout``, unless the URL sets one) and one transaction may take from its
    call to its answer. Past it the connection is shut under the waiting driver and the
    call raises ``StoreError``, so a silent network (a partition, a half-open
    connection) fails the caller instead of hanging it. A transaction that timed out may
    still have committed: retry commands with a ``command_id``. ``None``: no limit.
    ``max_page_count``: SQLite only, the most pages (4 KiB each by default) the database
    may hold (``PRAGMA max_page_count`` on every connection): a size cap for a store on a
    shared disk. A write past it, like one on a full disk, raises ``StoreFullError`` and
    lands nothing; writes succeed again once pages are freed or the cap is raised.

    Example::

        rv.App(store="sqlite:///shop.db?synchronous=NORMAL")
        rv.App(store="sqlite:///shop.db?max_page_count=262144")  # at most 1 GiB
        rv.App(store="postgresql+psycopg://app@db/shop?timeout=10")
    """

    synchronous: str = "FULL"
    busy_timeout_ms: int = 60_000
    read_threads: int | None = None  # default: 2 for SQLite, 4 for a server
    inline_writes: bool = True
    timeout: float | None = 60.0
    max_page_count: int | None = None


class Deadline:
    """The time limit of one PostgreSQL transaction (``StoreOptions.timeout``).

    The event loop calls ``expire`` when the time is up: it shuts down the socket of the
    connection the transaction runs on (between ``arm`` and ``disarm``), so the driver
    blocked on it fails at once, on whatever thread it waits. A socket is the one thing
    that wakes a driver waiting on a silent network: cancelling the await leaves a worker
    thread stuck, and PostgreSQL's cancel request would travel the same dead path.
    """

    __slots__ = ("_lock", "_owned", "_sock", "expired", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sock: socket.socket | None = None
        self._owned = False
        self._lock = threading.Lock()

    def arm(self, fileno: int) -> None:
        """Watch the connection on socket ``fileno`` (``StoreError`` if already expired).
        A duplicate of the descriptor is kept until ``disarm``: should the driver close
        the connection meanwhile, the number may be reused, the duplicate's socket not."""
        with self._lock:
            if self.expired:
                raise self.error()
            self._sock = socket.socket(fileno=os.dup(fileno))
            self._owned = True

    def arm_socket(self, sock: socket.socket) -> None:
        """``arm`` with a duplicate the caller keeps for the connection's life (and
        closes): on the event loop's connection, no ``dup`` per transaction."""
        with self._lock:
            if self.expired:
                raise self.error()
            self._sock, self._owned = sock, False

    def disarm(self) -> None:
        """The transaction is over: leave its connection alone."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None and self._owned:
            sock.close()  # the duplicate only: the driver's connection stays open

    def expire(self) -> None:
        """Time is up: shut the armed connection's socket down."""
        with self._lock:
            self.expired = True
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    self._sock.shutdown(socket.SHUT_RDWR)

    def error(self) -> StoreError:
        """What the caller gets."""
        return StoreError(
            f"PostgreSQL did not answer within {self.seconds:g} s (the store's timeout): "
            "the connection was dropped; the transaction may or may not have committed"
        )


def _fileno(conn: Connection) -> int:
    return int(conn.connection.dbapi_connection.fileno())  # type: ignore[union-attr]


class Database:
    """Engines, worker threads and SQL text helpers for one store URL."""

    def __init__(self, url: str, options: StoreOptions | None = None) -> None:
        try:
            parsed = sa.make_url(url)
        except Exception as exc:
            raise StoreError(f"cannot parse store URL {redact_url(url)!r}: {exc}") from exc
        opts = options or StoreOptions()
        query = dict(parsed.query)
        sync = str(query.pop("synchronous", opts.synchronous)).upper()
        if sync not in _SYNC_MODES:
            raise StoreError(f"synchronous must be one of {sorted(_SYNC_MODES)}, got {sync!r}")
        timeout = _timeout(query.pop("timeout", None), opts.timeout)
        max_pages = _max_pages(query.pop("max_page_count", None), opts.max_page_count)
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise StoreError(f"unsupported store URL scheme {parsed.drivername!r}")
        if backend != "sqlite" and max_pages is not None:
            raise StoreError("max_page_count is an option of SQLite stores")
        if backend == "postgresql" and timeout is not None:
            query.setdefault("connect_timeout", str(max(2, math.ceil(timeout))))
        self.url = parsed.set(query=query)
        self.options = opts
        self.synchronous = sync
        #: SQLite's ``PRAGMA max_page_count`` on every connection (None: SQLite's own).
        self.max_page_count = max_pages
        #: Seconds one PostgreSQL transaction may take (``StoreOptions.timeout``).
        self.timeout = None if backend == "sqlite" else timeout
        self.is_sqlite = backend == "sqlite"
        self.is_memory = self.is_sqlite and self.url.database in (None, "", ":memory:")
        self._writer_engine: Engine | None = None
        self._reader_engine: Engine | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._write_lock: threading.Lock | None = None
        self._wconn: Connection | None = None
        #: The writer connection's DBAPI cursor (SQLite's hot path), with that connection.
        self._wcur: tuple[Connection, Any] | None = None
        self._local = threading.local()  # each reader thread keeps its connection
        self._listener: tuple[threading.Thread, threading.Event] | None = None
        #: PostgreSQL channels listened to, and their callbacks (``listen``).
        self._channels: dict[str, list[Callable[[str], None]]] = {}
        self._watchers: list[Callable[[str], None]] = []
        self._reader_conns: list[Connection] = []
        self._begin_sql = "BEGIN" if self.is_memory else "BEGIN IMMEDIATE"
        if self.is_sqlite and not self.is_memory and self.url.database:
            self._write_lock = _file_lock(self.url.database)
        self.paramstyle = "qmark"
        self.integrity_errors: tuple[type[Exception], ...] = (sa.exc.IntegrityError,)
        self.operational_errors: tuple[type[Exception], ...] = (sqlite3.OperationalError,)
        self._quote: Callable[[str], str] = lambda n: n

    # -- lifecycle -------------------------------------------------------------------------

    def _make_engine(self, begin: str | None, *, writer: bool = False) -> Engine:
        """``writer``: the engine of a SQLite file's writes, whose connections keep their
        savepoints' and statements' undo journals in memory (see ``_on_connect``)."""
        kwargs: dict[str, Any] = {}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 60}
            if self.is_memory:
                kwargs["poolclass"] = StaticPool
        engine = sa.create_engine(self.url, **kwargs)
        if self.is_sqlite:
            _fast_sqlite_binding()
            sync, busy = self.synchronous, self.options.busy_timeout_ms

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _rec: Any) -> None:
                # pysqlite's implicit transactions break SAVEPOINT and transactional DDL:
                # take over BEGIN ourselves (SQLAlchemy's documented recipe).
                dbapi_conn.isolation_level = None
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout={int(busy)}")
                if not self.is_memory:
                    _wal(cur)
                cur.execute(f"PRAGMA synchronous={sync}")
                if self.max_page_count is not None:
                    cur.execute(f"PRAGMA max_page_count={int(self.max_page_count)}")
                if writer:
                    # A group commit's savepoint (and a many-row statement) keeps a copy
                    # of each page it changes until it ends, in memory up to 64 KiB and
                    # then in a temporary file: write calls per page once a group's rows
                    # land on more pages than that (64 commands on 64 aggregates of a
                    # grown log: 500-600 us of CPU per group, 220-250 in memory). The
                    # copies are bounded by what one transaction changes.
                    cur.execute("PRAGMA temp_store=MEMORY")
                cur.close()

            if begin is not None:

                @event.listens_for(engine, "begin")
                def _on_begin(conn: Connection) -> None:
                    conn.exec_driver_sql(begin)

        return engine

    def open_sync(self) -> None:
        """Create engines and check that the database can be reached."""
        if self._writer_engine is not None:
            return
        if self.is_sqlite and not self.is_memory:
            # Writers take the lock up front (no deadlock-prone lock upgrades).
            self._writer_engine = self._make_engine("BEGIN IMMEDIATE", writer=True)
            self._reader_engine = self._make_engine("BEGIN")
        elif self.is_sqlite:
            self._writer_engine = self._make_engine("BEGIN")
            self._reader_engine = self._writer_engine
        else:
            self._writer_engine = self._make_engine(None)
            self._reader_engine = self._writer_engine
        self.open_dialect(self._writer_engine.dialect)
        try:
            with self._writer_engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:
            self._dispose()
            raise StoreError(f"cannot open store {self.url.render_as_string()}: {exc}") from exc

    def listen(self, channel: str, callback: Callable[[str], None]) -> None:
        """PostgreSQL only: call ``callback(payload)`` on the event loop for every NOTIFY
        on ``channel``. One thread per database holds its own connection for all the
        channels asked for (it LISTENs to a new one within 0.1 s) and reconnects."""
        if self.is_sqlite:
            return
        callbacks = self._channels.setdefault(channel, [])
        if callback not in callbacks:
            callbacks.append(callback)
        if self._listener is not None:
            return
        loop = asyncio.get_running_loop()
        args, kwargs = self.writer_engine.dialect.create_connect_args(self.url)
        stop = threading.Event()
        heard: list[tuple[str, str]] = []  # notes not handed to the loop yet
        heard_lock = threading.Lock()

        def deliver() -> None:
            with heard_lock:
                notes = heard[:]
                heard.clear()
            for ch, payload in notes:
                for cb in self._channels.get(ch, ()):
                    try:
                        cb(payload)
                    except Exception:  # one callback must not starve the others
                        log.exception("NOTIFY %s handler failed", ch)

        def run() -> None:
            import psycopg  # only PostgreSQL stores get here

            while not stop.is_set():
                try:
                    with psycopg.connect(*args, **kwargs, autocommit=True) as conn:
                        joined: set[str] = set()
                        while not stop.is_set():
                            for ch in set(self._channels) - joined:
                                conn.execute(f"LISTEN {ch}")
                                joined.add(ch)
                            for note in conn.notifies(timeout=0.1):
                                with heard_lock:
                                    heard.append((note.channel, note.payload))
                                    first = len(heard) == 1
                                if first:  # one wake-up of the loop for a burst of notes
                                    loop.call_soon_threadsafe(deliver)
                except Exception as exc:  # server restart, network: retry in a moment
                    log.warning("LISTEN %s: %s; reconnecting", ", ".join(self._channels), exc)
                    stop.wait(1.0)

        thread = threading.Thread(target=run, name="rv-listener", daemon=True)
        self._listener = (thread, stop)
        thread.start()

    def watch(self, callback: Callable[[str], None], interval: float = 0.005) -> None:
        """A SQLite file: call ``callback("")`` on the event loop after commits by other
        connections, of this process or another (PostgreSQL: see ``listen``; in-memory
        SQLite: nothing). SQLite has no notifications, so one thread per database reads
        ``PRAGMA data_version`` on its own connection every ``interval`` seconds (a counter
        in the WAL index's shared memory: no table is read, no lock is held) and calls back
        when it moved."""
        if not self.is_sqlite or self.is_memory:
            return
        self._watchers.append(callback)
        if self._listener is not None:
            return
        loop = asyncio.get_running_loop()
        path, stop, callbacks = str(self.url.database), threading.Event(), self._watchers

        def changed() -> None:
            for cb in list(callbacks):
                cb("")

        def run() -> None:
            while not stop.is_set():
                try:
                    conn = sqlite3.connect(path, timeout=1.0)
                    try:
                        seen = conn.execute("PRAGMA data_version").fetchone()[0]
                        while not stop.wait(interval):
                            now = conn.execute("PRAGMA data_version").fetchone()[0]
                            if now != seen:
                                seen = now
                                loop.call_soon_threadsafe(changed)
                    finally:
                        conn.close()
                except RuntimeError:  # the event loop is closed: nobody to wake
                    return
                except sqlite3.Error as exc:
                    log.warning("watching %s: %s; retrying", path, exc)
                    stop.wait(1.0)

        thread = threading.Thread(target=run, name="rv-watcher", daemon=True)
        self._listener = (thread, stop)
        thread.start()

    def _stop_listening(self) -> None:
        if self._listener is not None:
            thread, stop = self._listener
            stop.set()
            thread.join(timeout=5)
            self._listener = None
        self._watchers.clear()
        self._channels.clear()

    def open_dialect(self, dialect: sa.Dialect) -> None:
        """Adopt the SQL text conventions (quoting, parameter marks) of ``dialect``."""
        self.paramstyle = "qmark" if dialect.paramstyle == "qmark" else "format"
        self.integrity_errors = (sa.exc.IntegrityError, dialect.loaded_dbapi.IntegrityError)
        self.operational_errors = (dialect.loaded_dbapi.OperationalError,)
        self._quote = dialect.identifier_preparer.quote

    async def open(self) -> None:
        """Open engines and worker threads (idempotent)."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="rv-writer")
            if self.is_memory:
                self._readers = self._writer  # one shared connection: one thread
            else:
                threads = self.options.read_threads or (2 if self.is_sqlite else 4)
                self._readers = ThreadPoolExecutor(threads, thread_name_prefix="rv-reader")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self.open_sync)

    def _dispose(self) -> None:
        self._wcur = None
        if self._wconn is not None:
            self._wconn.close()
            self._wconn = None
        for conn in self._reader_conns:
            with contextlib.suppress(Exception):  # owned by a finished reader thread
                conn.close()
        self._reader_conns.clear()
        for engine in {id(e): e for e in (self._writer_engine, self._reader_engine) if e}.values():
            engine.dispose()
        self._writer_engine = self._reader_engine = None

    def close_sync(self) -> None:
        """Close the connections and engines of a database used only through ``open_sync``
        and ``read_sync`` on the calling thread (a Spark executor's task): no worker
        threads to stop."""
        self._stop_listening()
        self._dispose()

    async def close(self) -> None:
        """Dispose engines and stop the worker threads."""
        self._stop_listening()
        writer, readers = self._writer, self._readers
        self._writer = self._readers = None
        if readers is not None and readers is not writer:
            # off the event loop: a reader stuck on a silent network needs its deadline's
            # timer (on the loop) to come free
            await asyncio.to_thread(readers.shutdown, wait=True)
        if writer is not None:
            await asyncio.get_running_loop().run_in_executor(writer, self._dispose)
            writer.shutdown(wait=True)

    # -- running work ----------------------------------------------------------------------

    @property
    def writer_engine(self) -> Engine:
        """The engine of the writer thread."""
        if self._writer_engine is None:
            raise StoreError("store is not open")
        return self._writer_engine

    @property
    def reader_engine(self) -> Engine:
        """The engine of the reader threads."""
        if self._reader_engine is None:
            raise StoreError("store is not open")
        return self._reader_engine

    def _writer_conn(self) -> Connection:
        # The writer thread keeps one connection: no pool checkout/reset per transaction.
        conn = self._wconn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._wconn = self.writer_engine.connect()
        return conn

    def create_sync(self, conn: Connection, metadata: sa.MetaData) -> None:
        """``metadata.create_all`` inside ``serialize_ddl`` (tables created if missing)."""
        self.serialize_ddl(conn)
        metadata.create_all(conn)

    def serialize_ddl(self, conn: Connection) -> None:
        """Make processes that create or change tables at once take turns: on PostgreSQL a
        transaction-scoped advisory lock (concurrent ``CREATE TABLE`` of one name
        otherwise fails on the catalog's unique index, e.g. replicas starting together);
        SQLite's writers are serialised already. The lock is per schema (catalog names
        clash only within one) and its wait is bounded by ``lock_timeout``."""
        if not self.is_sqlite:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_DDL_LOCK_TIMEOUT}'")
            conn.exec_driver_sql(
                f"SELECT pg_advisory_xact_lock({_DDL_LOCK}, "
                "hashtext(coalesce(current_schema(), '')))"
            )

    def write_sync(
        self,
        fn: Callable[[Connection], T],
        deadline: Deadline | None = None,
        *,
        autocommit: bool = False,
        sorts: bool = False,
        locked: bool = False,
    ) -> T:
        """Run ``fn`` in one write transaction (call on the writer thread).
        ``autocommit`` (PostgreSQL, ``write_statement``): no transaction around it.
        ``sorts``: see ``write``. ``locked``: the caller holds the file's write lock
        (``try_inline_write``: then it may call this on its own thread)."""
        lock = self._write_lock
        if lock is not None and not locked:
            lock.acquire()
        conn: Connection | None = None
        try:
            conn = self._writer_conn()
            if deadline is not None:
                deadline.arm(_fileno(conn))
            if autocommit:
                return _in_autocommit(conn, fn)
            if sorts and self.is_sqlite and not self.is_memory:
                return _sorting_in_files(conn, fn)
            with conn.begin():
                return fn(conn)
        except sa.exc.OperationalError as exc:
            raise write_error(exc) from exc
        except self.operational_errors as exc:  # raised by the DBAPI cursor of a hot path
            if conn is not None and not conn.closed:
                conn.invalidate()  # the next transaction opens a fresh connection
            raise write_error(exc) from exc
        finally:
            if deadline is not None:
                deadline.disarm()
            if lock is not None:
                lock.release()

    async def write_statement(self, fn: Callable[[Any], T]) -> T:
        """A write of one statement, its own transaction: ``fn`` gets a DBAPI cursor. On
        PostgreSQL it runs on the writer thread with the connection in autocommit (one
        round trip: no BEGIN and COMMIT around it); elsewhere inside ``write_raw``'s
        transaction. ``fn`` may read first, but what it writes must be one statement (a
        failure after it would not roll it back)."""
        if self.is_sqlite:
            return await self.write_raw(fn)
        if self._writer is None:
            raise StoreError("store is not open")

        def on_cursor(conn: Connection) -> T:
            cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                return fn(cur)
            finally:
                cur.close()

        return await self._timed(
            self._writer, lambda d: self.write_sync(on_cursor, d, autocommit=True)
        )

    @property
    def can_inline(self) -> bool:
        """Whether ``try_inline_write`` can ever succeed (a SQLite file with
        ``inline_writes``): then waiting for the loop to be alone is worth it."""
        return self.options.inline_writes and self.is_sqlite and not self.is_memory

    def try_inline_write(self) -> bool:
        """Take the file's write lock if it is free right now (then call
        ``write_raw_sync(fn, locked=True)`` on this thread). Only for SQLite files: a
        lone append skips the hop to the writer thread."""
        lock = self._write_lock
        return bool(self.can_inline and lock is not None and lock.acquire(blocking=False))

    def write_raw_sync(
        self, fn: Callable[[Any], T], *, locked: bool = False, deadline: Deadline | None = None
    ) -> T:
        """SQLite's append hot path: ``fn`` gets a DBAPI cursor inside plain
        ``BEGIN IMMEDIATE``/``COMMIT`` statements, which skips SQLAlchemy's
        per-transaction bookkeeping. (PostgreSQL appends run on ``pgasync``.)
        """
        lock = self._write_lock
        if lock is not None and not locked:
            lock.acquire()
        try:
            conn = self._writer_conn()
            if deadline is not None:
                deadline.arm(_fileno(conn))
            held = self._wcur
            if held is None or held[0] is not conn or conn.invalidated:
                held = self._wcur = (conn, conn.connection.dbapi_connection.cursor())  # type: ignore[union-attr]
            cur = held[1]
            cur.execute(self._begin_sql)
            try:
                out = fn(cur)
                cur.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled the transaction back itself (a full disk: then a
                # ROLLBACK would fail and hide the cause), or left it open (a failed
                # COMMIT): end it if it is open, or the connection's next BEGIN fails
                if cur.connection.in_transaction:
                    try:
                        cur.execute("ROLLBACK")
                    except sqlite3.Error:
                        conn.invalidate()  # closing it rolls back; the next write reopens
                raise
            return out
        except sqlite3.OperationalError as exc:
            raise write_error(exc) from exc
        finally:
            if deadline is not None:
                deadline.disarm()
            if lock is not None:
                lock.release()

    async def write_raw(self, fn: Callable[[Any], T]) -> T:
        """Run ``write_raw_sync(fn)`` on the writer thread."""
        if self._writer is None:
            raise StoreError("store is not open")
        return await self._timed(self._writer, lambda d: self.write_raw_sync(fn, deadline=d))

    def deadline(self) -> Deadline | None:
        """A fresh time limit for one transaction (PostgreSQL with a ``timeout``)."""
        return None if self.timeout is None else Deadline(self.timeout)

    async def _timed(self, pool: ThreadPoolExecutor, work: Callable[[Deadline | None], T]) -> T:
        """Run ``work`` on ``pool`` under a fresh ``deadline`` (armed by ``work``)."""
        loop = asyncio.get_running_loop()
        deadline = self.deadline()
        if deadline is None:
            return await loop.run_in_executor(pool, work, None)
        timer: asyncio.TimerHandle | None = loop.call_later(deadline.seconds, deadline.expire)
        try:
            return await loop.run_in_executor(pool, work, deadline)
        except asyncio.CancelledError:
            timer = None  # the caller left, the worker may still wait: keep its deadline
            raise
        except Exception as exc:
            if deadline.expired:
                raise deadline.error() from exc
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def read_sync(
        self,
        fn: Callable[[Connection], T],
        deadline: Deadline | None = None,
        *,
        autocommit: bool = False,
    ) -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot) on the calling thread.
        ``autocommit``: no transaction, ``fn`` reads with one statement on the connection's
        DBAPI cursor."""
        if self.is_memory:  # the one shared connection, used by the writer thread
            return self.write_sync(fn)
        for attempt in (1, 2):
            conn: Connection | None = getattr(self._local, "conn", None)
            try:
                if conn is None or conn.closed or conn.invalidated:
                    conn = self._local.conn = self.reader_engine.connect()
                    self._reader_conns.append(conn)
                if deadline is not None:
                    deadline.arm(_fileno(conn))
                if autocommit and self.is_sqlite:
                    # SQLite's connections send no BEGIN of their own (isolation_level
                    # None): a lone statement is its own read transaction
                    return fn(conn)
                if autocommit:
                    return _autocommit(conn, fn)
                with conn.begin():
                    return fn(conn)
            except _LostConnection as lost:
                # as below: the server closed the connection (restarted, killed it)
                timed_out = deadline is not None and deadline.expired
                if attempt == 1 and not timed_out:
                    continue
                raise StoreError(f"store read failed: {lost.__cause__}") from lost.__cause__
            except sa.exc.OperationalError as exc:
                # A read is safe to repeat once on a fresh connection (server restarted,
                # connection killed); a second failure is reported, as is a timeout.
                timed_out = deadline is not None and deadline.expired
                if attempt == 1 and exc.connection_invalidated and not timed_out:
                    continue
                raise StoreError(f"store read failed: {exc.orig}") from exc
            finally:
                if deadline is not None:
                    deadline.disarm()
        raise AssertionError("unreachable")  # pragma: no cover

    async def write(self, fn: Callable[[Connection], T], *, sorts: bool = False) -> T:
        """Run ``fn`` in one write transaction on the writer thread. ``sorts``: ``fn``
        may sort a whole table (``CREATE INDEX`` on one that holds rows): on a SQLite
        file its temporary data goes to files, not to the writer's memory."""
        if self._writer is None:
            raise StoreError("store is not open")
        return await self._timed(self._writer, partial(self.write_sync, fn, sorts=sorts))

    async def read_point(self, fn: Callable[[Connection], T]) -> T:
        """``read`` for a short point read (an aggregate's snapshot and tail): on a SQLite
        file it runs on the calling thread, where it costs less than the hop to a reader
        thread (a WAL reader never waits for the writer). On PostgreSQL ``fn`` runs on a
        reader thread with no transaction around it (no BEGIN and COMMIT: two round trips
        fewer), so it must read with one statement, which sees one consistent snapshot
        of the database. In memory it is ``read``."""
        if self.is_sqlite and not self.is_memory and self._readers is not None:
            return self.read_sync(fn)
        if self._readers is None:
            raise StoreError("store is not open")
        if self.is_sqlite:
            return await self.read(fn)
        return await self._timed(self._readers, partial(self.read_sync, fn, autocommit=True))

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one read transaction on a reader thread."""
        if self._readers is None:
            raise StoreError("store is not open")
        return await self._timed(self._readers, partial(self.read_sync, fn))

    # -- SQL text helpers (hot paths bypass the expression compiler) -----------------------

    def q(self, name: str) -> str:
        """Quote an identifier for this dialect."""
        return self._quote(name)

    def placeholders(self, n: int) -> str:
        """``?, ?, ?`` or ``%s, %s, %s`` depending on the driver."""
        mark = "?" if self.paramstyle == "qmark" else "%s"
        return ", ".join([mark] * n)

    @property
    def mark(self) -> str:
        """This driver's parameter mark (``?`` or ``%s``)."""
        return "?" if self.paramstyle == "qmark" else "%s"

    def member_of(self, column: str, values: Sequence[str]) -> tuple[str, list[Any]]:
        """``column`` (of text) is one of ``values``: the condition and its parameters.
        On PostgreSQL ``= ANY(...)`` of one parameter, the values as a JSON array: a long
        ``IN`` list costs the server ~5x more to parse and plan (20 against 3 us per id
        at 500 ids), and psycopg takes ~1 us per element to send a list as an array
        (one JSON text: ~0.05 us). Elsewhere an ``IN`` list of marks."""
        if not self.is_sqlite:  # PostgreSQL
            return (
                f"{column} = ANY(ARRAY(SELECT json_array_elements_text({self.mark}::json)))",
                [json.dumps(list(values))],
            )
        return f"{column} IN ({self.placeholders(len(values))})", list(values)


class _LostConnection(Exception):
    """``_autocommit``'s connection is gone (its cause: the driver's error); it has been
    invalidated, so the next read opens another."""


def _in_autocommit(conn: Connection, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` with the DBAPI connection (psycopg) in autocommit: each statement is
    its own transaction, with no BEGIN or COMMIT sent. The connection is back to
    transactions afterwards, for the reads or writes in transactions that share it
    (unless it broke: its caller invalidates it)."""
    dbapi: Any = conn.connection.dbapi_connection
    dbapi.autocommit = True
    try:
        return fn(conn)
    finally:
        if not (conn.invalidated or _broken(dbapi)):
            dbapi.autocommit = False


def _broken(dbapi: Any) -> bool:
    """Whether a DBAPI connection (psycopg) lost its server or was closed."""
    return bool(getattr(dbapi, "broken", False) or getattr(dbapi, "closed", False))


def _autocommit(conn: Connection, fn: Callable[[Connection], T]) -> T:
    """``_in_autocommit`` for a read: ``_LostConnection`` when the connection broke (the
    driver's error is its cause), the connection invalidated."""
    try:
        return _in_autocommit(conn, fn)
    except Exception as exc:
        if not _broken(conn.connection.dbapi_connection):
            raise
        conn.invalidate()
        raise _LostConnection() from exc


def _wal(cur: Any) -> None:
    """Put a SQLite file in WAL mode, once: a connection to a file already in WAL mode
    only reads the mode. Switching takes an exclusive lock that SQLite refuses at once
    (no busy wait) while other connections read, so processes opening a fresh file
    together retry it briefly."""
    for attempt in range(50):
        if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            return
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 49:
                raise
            time.sleep(0.01 * (1 + attempt % 5))


_TABLE_SAFE = re.compile(r"[^a-z0-9_]+")


def table_name(prefix: str, name: str) -> str:
    """A portable table name for a topic or read model (``cdc.orders`` -> ``ev_cdc_orders``)."""
    cleaned = _TABLE_SAFE.sub("_", name.lower()).strip("_")
    return f"{prefix}{cleaned}"[:60]
