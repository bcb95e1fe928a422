"""Arrow-native pages of a topic's stored columns, through an ADBC driver.

``read_batches`` (and what is built on it: exports, Spark hand-offs, batch handlers and
column-fold read models catching up) spends most of its time turning rows of Python
values into Arrow arrays. An ADBC driver reads a query's result straight into Arrow (C
all the way): ``adbc-driver-sqlite`` for a SQLite file, ``adbc-driver-postgresql``
(binary COPY) for PostgreSQL, both in helper processes of the store's own
(``arrowhelper.py``). Both are optional (the ``arrow`` extra): without one, or for an
in-memory SQLite database, ``ArrowPages.available`` is False and reads go through the SQL
rows.

Each page is one query, ``_offset`` keyset-paged (appends to a topic commit in offset
order, so a page never skips a row a later page could still see). A page the driver
cannot read (a column whose SQLite values are not all of one storage class, a broken
connection, a helper that died) is read as rows instead: the caller gets ``None`` for it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .arrowhelper import DEPTH, HELPERS, Asked, HelperPool
from .database import Database

#: Each store kind's driver module (what its helpers import).
_DRIVERS = {"sqlite": "adbc_driver_sqlite", "postgresql": "adbc_driver_postgresql"}


class ArrowPages:
    """Pages of stored columns as Arrow tables, read by the store's helper processes
    (``HelperPool``): a SQLite file's or PostgreSQL's, where the kind's driver is
    installed."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._helpers: HelperPool | None = None
        kind = "sqlite" if db.is_sqlite else "postgresql"
        if (
            os.name == "posix"  # (helpers talk through pipes with select)
            and not db.is_memory
            and importlib.util.find_spec(_DRIVERS[kind]) is not None
        ):
            target = str(db.url.database) if db.is_sqlite else conninfo(db)
            self._helpers = HelperPool(kind, target, int(db.options.busy_timeout_ms))

    @property
    def available(self) -> bool:
        """True when pages can be read as Arrow (a driver is installed, helpers may run):
        always by other processes, the helpers."""
        return self._helpers is not None and self._helpers.usable()

    @property
    def ahead(self) -> int:
        """Pages worth reading at once: two per helper (``arrowhelper.DEPTH``)."""
        return HELPERS * DEPTH

    def wanted(self, remaining: int) -> bool:
        """Whether a page of a read with ``remaining`` rows left is worth a hop to a
        thread for ``page``: not for a read too short to start a helper while none runs
        (it would come back as rows)."""
        return self._helpers is not None and self._helpers.wanted(remaining)

    def page(
        self, sql: str, rows: int, remaining: int = 0, asked: Asked | None = None
    ) -> pa.Table | None:
        """The result of ``sql`` (at most ``rows`` rows, no parameters) as an Arrow table,
        on the calling thread; None if it could not be read that way. ``remaining``: the
        rows the read has left (a long read starts the helpers). ``asked``: what ``ask``
        sent for it (the helper's answer is all that is left)."""
        if self._helpers is None:
            return None
        if asked is not None:
            return self._helpers.answer(asked)
        return self._helpers.page(sql, rows, remaining)

    def ask(self, sql: str, rows: int, remaining: int = 0) -> Asked | None:
        """``page``'s request sent now, on the calling thread (the event loop's), where it
        need not wait: to a ready helper with room for it. ``page`` then takes it
        (``asked``) and only waits for the answer; None: ``page`` asks itself."""
        if self._helpers is None:
            return None
        return self._helpers.ask(sql, rows, remaining)

    def close(self) -> None:
        """Stop the helpers (one with pages asked stops when they are answered)."""
        if self._helpers is not None:
            self._helpers.close()


def conninfo(db: Database) -> str:
    """libpq's ``key='value'`` connection string of a PostgreSQL store (its URL's query
    options included), with the store's time limit as ``statement_timeout``, for the
    helpers' connections (``application_name`` ``reventless-arrow`` unless the URL names
    one)."""
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
    params.setdefault("application_name", "reventless-arrow")
    settings = ["-c enable_sort=off"]
    if db.timeout is not None:
        settings.append(f"-c statement_timeout={int(db.timeout * 1000)}")
    params["options"] = " ".join([params.get("options", ""), *settings]).strip()

    def quoted(v: str) -> str:
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{k}={quoted(v)}" for k, v in params.items())


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
        columns.append(_constant(fold, n))
    return pa.Table.from_arrays(columns, names=list(names))


#: ``_constant``'s columns: pages of one size repeat them (Arrow arrays are immutable).
_CONSTANTS: dict[tuple[Fold, int], pa.ChunkedArray] = {}


def _constant(fold: Fold, n: int) -> pa.ChunkedArray:
    """A column of ``n`` rows that each hold ``fold``'s value, made once per fold and
    length (a catch-up's pages are all of one size: 0.15 us an event made anew)."""
    key = (fold, n)
    column = _CONSTANTS.get(key)
    if column is None:
        if len(_CONSTANTS) >= 256:
            _CONSTANTS.clear()
        nulls = pa.nulls(n, fold.type)
        one = nulls if fold.value is None else pc.fill_null(nulls, fold.value)
        column = _CONSTANTS[key] = pa.chunked_array([one])
    return column
