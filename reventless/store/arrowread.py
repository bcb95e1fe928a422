"""Arrow-native pages of a topic's stored columns, through an ADBC driver.

``read_batches`` (and what is built on it: exports, Spark hand-offs, batch handlers and
column-fold read models catching up) spends most of its time turning rows of Python
values into Arrow arrays. An ADBC driver reads a query's result straight into Arrow (C
all the way): ``adbc-driver-postgresql`` (binary COPY) for PostgreSQL, on connections of
this reader's own; ``adbc-driver-sqlite`` for a SQLite file, in helper processes
(``arrowhelper.py``: the driver carries its own copy of SQLite, which must not share a
process with the store's). Both are optional (the ``arrow`` extra): without one, or for
an in-memory SQLite database, ``ArrowPages.available`` is False and reads go through the
SQL rows.

Each page is one query, ``_offset`` keyset-paged (appends to a topic commit in offset
order, so a page never skips a row a later page could still see). A page the driver
cannot read (a column whose SQLite values are not all of one storage class, a broken
connection) is read as rows instead: the caller gets ``None`` for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .arrowhelper import DEPTH, HELPERS, Asked, HelperPool
from .database import Database

log = logging.getLogger("reventless.store")

#: Seconds reads go through rows after a connect to the database failed.
_RETRY_AFTER = 30.0


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class ArrowPages:
    """Pages of stored columns as Arrow tables: PostgreSQL's on an idle ADBC connection of
    its own (opened on first use, kept for the next page, closed by ``close``), a SQLite
    file's through helper processes (``HelperPool``)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: A SQLite file's helpers (the driver never loads in this process).
        self._helpers: HelperPool | None = None
        self._driver = None
        if not db.is_sqlite:
            # the driver's own API, not its DB-API module: that one imports pyarrow.dataset
            # and, where installed, pandas (tens of milliseconds at a process's start)
            self._driver = _module("adbc_driver_postgresql")
        elif (
            os.name == "posix"  # (helpers talk through pipes with select)
            and not db.is_memory
            and importlib.util.find_spec("adbc_driver_sqlite") is not None
        ):
            self._helpers = HelperPool(str(db.url.database), int(db.options.busy_timeout_ms))
        self._idle: list[_Reader] = []
        #: Connections ``warm`` is opening.
        self._warming = 0
        self._lock = threading.Lock()
        #: Notified when a connection ``warm`` opened is ready (or failed to open).
        self._warmed = threading.Condition(self._lock)
        self._closed = False
        #: A failed connect switches to rows until then (monotonic seconds): a server that
        #: is down is not asked again for every page, one that is back is used again.
        self._retry_at = 0.0

    @property
    def available(self) -> bool:
        """True when pages can be read as Arrow (a driver is installed and connects)."""
        if self._closed or (self._driver is None and self._helpers is None):
            return False
        return self._retry_at == 0.0 or time.monotonic() >= self._retry_at

    @property
    def off_process(self) -> bool:
        """True when pages are read by other processes (a SQLite file's helpers)."""
        return self._helpers is not None and self.available

    @property
    def ahead(self) -> int:
        """Pages worth reading at once: two on PostgreSQL (a connection each), two per
        helper of a SQLite file (``arrowhelper.DEPTH``)."""
        return 2 if self._helpers is None else HELPERS * DEPTH

    def wanted(self, remaining: int) -> bool:
        """Whether a page of a read with ``remaining`` rows left is worth a hop to a
        thread for ``page``: not for a SQLite file whose read is too short to start a
        helper while none runs (it would come back as rows)."""
        if not self.available:
            return False
        return self._helpers is None or self._helpers.wanted(remaining)

    def warm(self) -> None:
        """Open PostgreSQL's reader connections now, in threads of their own, for the
        pages about to be read (a catch-up at start): an ADBC connection takes ~40 ms to
        open (~30 ms of it the driver's CPU), and the pages read at once each want one.
        A SQLite file's helpers start with its first long read; nothing happens here."""
        if self._driver is None or not self.available:
            return
        with self._lock:
            missing = self.ahead - len(self._idle) - self._warming
            self._warming += max(0, missing)
        for _ in range(missing):
            threading.Thread(target=self._open_idle, name="rv-arrow-warm", daemon=True).start()

    def _open_idle(self) -> None:
        try:
            conn = self._connect()
        except Exception as exc:  # no server: the first page falls back to rows and says so
            log.debug("opening an Arrow reader connection ahead failed: %s", exc)
            conn = None
        with self._lock:
            self._warming -= 1
            self._warmed.notify()
            if conn is not None and not self._closed:
                self._idle.append(conn)
                return
        if conn is not None:
            conn.close()

    def _connect(self) -> _Reader:
        driver = self._driver
        assert driver is not None
        return _Reader(driver, conninfo(self.db))

    def page(
        self, sql: str, rows: int, remaining: int = 0, asked: Asked | None = None
    ) -> pa.Table | None:
        """The result of ``sql`` (at most ``rows`` rows, no parameters) as an Arrow table,
        on the calling thread; None if it could not be read that way. ``remaining``: the
        rows the read has left (a SQLite file starts its helpers for a long read).
        ``asked``: what ``ask`` sent for it (the helper's answer is all that is left)."""
        if asked is not None:
            assert self._helpers is not None
            return self._helpers.answer(asked)
        if not self.available:
            return None
        if self._helpers is not None:
            return self._helpers.page(sql, rows, remaining)
        with self._lock:
            while not self._idle and self._warming and not self._closed:
                self._warmed.wait()  # one ``warm`` is opening: sooner than opening another
            conn = self._idle.pop() if self._idle else None
        try:
            if conn is None:
                conn = self._connect()
        except Exception as exc:  # no server, no file, a driver that cannot load
            log.warning("Arrow reads fall back to rows for %s s: %s", _RETRY_AFTER, exc)
            self._retry_at = time.monotonic() + _RETRY_AFTER
            return None
        try:
            table = conn.read(sql)
        except Exception as exc:  # this page goes through rows; the connection may be gone
            log.debug("Arrow read of a page fell back to rows: %s", exc)
            conn.close()
            return None
        with self._lock:
            if self._closed:
                conn.close()
            else:
                self._idle.append(conn)
        return table

    def ask(self, sql: str, rows: int, remaining: int = 0) -> Asked | None:
        """``page``'s request sent now, on the calling thread (the event loop's), where it
        need not wait: to a SQLite file's ready helper with room for it. ``page`` then
        takes it (``asked``) and only waits for the answer; None: ``page`` asks itself."""
        if self._helpers is None or not self.available:
            return None
        return self._helpers.ask(sql, rows, remaining)

    def close(self) -> None:
        """Close the idle connections; a page still being read closes its own after."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._warmed.notify_all()
        for conn in idle:
            conn.close()
        if self._helpers is not None:
            self._helpers.close()


def conninfo(db: Database) -> str:
    """libpq's ``key='value'`` connection string of a PostgreSQL store (its URL's query
    options included), with the store's time limit as ``statement_timeout``."""
    url = db.url
    params: dict[str, str] = {
        k: " ".join(v) if isinstance(v, tuple) else v for k, v in url.query.items()
    }
    for key, value in (
        ("host", url.host),
        ("port", url.port),
        ("dbname", url.database),
        ("user", url.username),
        ("password", url.password),
    ):
        if value is not None:
            params[key] = str(value)
    # Pages are read in index order (``_offset``, the primary key): without statistics (a
    # freshly loaded table, before autovacuum analyzes it) the planner may sort the whole
    # table instead of walking the index, 20x slower. This connection only reads pages.
    settings = ["-c enable_sort=off"]
    if db.timeout is not None:
        settings.append(f"-c statement_timeout={int(db.timeout * 1000)}")
    params["options"] = " ".join([params.get("options", ""), *settings]).strip()

    def quoted(v: str) -> str:
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{k}={quoted(v)}" for k, v in params.items())


class _Reader:
    """One ADBC connection of PostgreSQL's driver (autocommit, as ADBC connections open).
    The driver's handles do not close themselves when dropped (its DB-API connection
    did): one that is never closed (an App dropped without ``stop``) is closed when it
    is garbage-collected, or at exit, instead of staying open on the server."""

    def __init__(self, driver: Any, uri: str) -> None:
        import adbc_driver_manager

        self._manager = adbc_driver_manager
        self._db = driver.connect(uri)
        try:
            self._conn = adbc_driver_manager.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise
        self._release = weakref.finalize(self, _release, self._conn, self._db)

    def read(self, sql: str) -> pa.Table:
        """``sql``'s result (no parameters) as an Arrow table."""
        stmt = self._manager.AdbcStatement(self._conn)
        try:
            stmt.set_sql_query(sql)
            handle, _ = stmt.execute_query()
            return pa.RecordBatchReader.from_stream(handle).read_all()
        finally:
            stmt.close()

    def close(self) -> None:
        self._release()


def _release(conn: Any, db: Any) -> None:
    """Close an ADBC connection, then its database handle (errors are logged: a broken
    connection has nothing more to close)."""
    for handle in (conn, db):
        try:
            handle.close()
        except Exception:
            log.debug("closing an ADBC connection failed", exc_info=True)


#: Columns a page read as Arrow may ask for as one flag in their place (``folded_select``):
#: metadata most logs leave NULL in every row (no causation, user, address, tenant or
#: trace context given), and integers most logs hold one value of (one schema version,
#: one partition, or a catch-up's page of one partition). The drivers decode each value
#: of a page, NULL or not, at about the cost of any other: these were seven columns of a
#: 17-column page. (Not ``_row_idx``: any command of more than one event breaks it.)
FOLD_NULL = ("_causation_id", "_user", "_ip", "_tenant", "_trace")
FOLD_INT = ("_schema_version", "_partition")
FOLDABLE = frozenset(FOLD_NULL + FOLD_INT)
#: The rows a page read whole must have for what it holds to be taken as what a topic
#: holds: a short page (a live tail, a catch-up near the head) says little, and a fold
#: it taught that a long page breaks costs that page a second read.
LEARN_AT = 1000
#: The flag's name: NULL in a row whose folded columns hold what they are assumed to.
FLAG = "_rv_folded"


@dataclass(frozen=True)
class Fold:
    """What a folded column is assumed to hold in every row: ``value`` (None: NULL), as
    a whole read gave it (``type``)."""

    value: int | None
    type: pa.DataType


def constants(page: pa.Table, names: Sequence[str], among: Iterable[str]) -> dict[str, Fold]:
    """The columns of ``among`` (``FOLDABLE`` ones) with one value in every row of
    ``page`` (a read of ``names``): NULL, or one integer for ``FOLD_INT``'s."""
    n, wanted, out = page.num_rows, set(among), {}
    for name, col in zip(names, page.columns, strict=True):
        if name not in wanted or not n:
            continue
        if col.null_count == n:
            out[name] = Fold(None, col.type)
        elif name in FOLD_INT and not col.null_count and pa.types.is_integer(col.type):
            low, high = pc.min_max(col).values()
            if low == high:
                out[name] = Fold(int(low.as_py()), col.type)
    return out


def folded_select(q: Any, table: str, names: Sequence[str], folds: Mapping[str, Fold]) -> str:
    """``SELECT`` of ``names`` without the folded ones, and a last column, ``FLAG``, that
    is NULL in a row where each of them holds its ``Fold``'s value (``unfold`` takes the
    page apart). A NULL where an integer is assumed makes the flag 1, as any other value."""
    kept = [q(n) for n in names if n not in folds]
    holds = " AND ".join(
        f"{q(n)} IS NULL" if f.value is None else f"{q(n)} = {int(f.value)}"
        for n, f in folds.items()
    )
    flag = f"CASE WHEN {holds} THEN NULL ELSE 1 END AS {q(FLAG)}"
    return f"SELECT {', '.join([*kept, flag])} FROM {q(table)}"


def unfold(page: pa.Table, names: Sequence[str], folds: Mapping[str, Fold]) -> pa.Table | None:
    """A page read by ``folded_select``, as the whole read of ``names`` gives it; None when
    a row holds something else in a folded column (the page is read again whole)."""
    n = page.num_rows
    if page.column(page.num_columns - 1).null_count != n:
        return None
    kept = iter(page.columns[:-1])
    columns = []
    for name in names:
        fold = folds.get(name)
        if fold is None:
            columns.append(next(kept))
            continue
        nulls = pa.nulls(n, fold.type)
        one = nulls if fold.value is None else pc.fill_null(nulls, fold.value)
        columns.append(pa.chunked_array([one]))
    return pa.Table.from_arrays(columns, names=list(names))
