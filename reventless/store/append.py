"""The append path shared by the stores, and the SQLite appender.

A group of append requests is written in one transaction: everything at once, or, if
one request clashes (unique ``(aggregate id, version)``), each request in its own
savepoint so only that one fails. Requests are handled in topic-name order: on
PostgreSQL each topic's counter row is locked to commit, so two groups never deadlock.

Offsets: SQLite serialises writers (``BEGIN IMMEDIATE``), so the next offset is the
largest one plus one (``_offset`` is the rowid: an O(log n) lookup and no extra page to
write). A lone request of up to a statement's worth of rows (a command's) is inserted
with NULL offsets, which SQLite itself turns into exactly those (``lastrowid`` tells
them): no lookup at all. PostgreSQL bumps the topic's counter row (``pgasync.py``).
Retention must never delete a topic's newest row (SQLite derives the head from it).

A request with a command id writes its ``rv_commands`` row (where it landed, the
aggregate's version after it) in the same transaction; if the id is recorded already the
request is a ``duplicate`` and nothing of it lands. SQLite writes that row before the
events (a duplicate has written nothing yet); PostgreSQL after them, in the request's
transaction or savepoint, which ``DuplicateCommand`` then undoes.

The SQLite appender talks to the DBAPI cursor directly: SQLAlchemy's per-statement
bookkeeping (and its compiled SAVEPOINT clauses) cost more than the SQL here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from operator import is_, itemgetter
from typing import Any

from ..codec.columns import META_FIELDS
from ..errors import ConcurrencyError
from ..scheduling import ScheduleWrite
from ..tags import AppendCondition
from .database import Database
from .schedules import write_statements
from .tagindex import TagIndex

#: Bound parameters per statement: SQLite's historical limit (999) keeps any build safe.
_MAX_VARIABLES = 999
#: Statements the appender keeps built (``_values``, ``_lean``): past it, it starts over.
_STATEMENTS = 1024
#: Where a stored row holds metadata that is often NULL (correlation, causation, user,
#: service, ip, tenant, trace): a column NULL in every row of an INSERT is left out of it
#: (``Appender._lean``), so no None is bound there (binding one costs ~1,200 instructions).
_OFTEN_NULL = tuple(
    i
    for i, f in enumerate(META_FIELDS)
    if f.nullable and f.name not in ("_aggregate_id", "_version")
)
#: The ``_OFTEN_NULL`` values of a row led by its offset ([0]) or without it ([1]).
_OFTEN_AT = (itemgetter(*_OFTEN_NULL), itemgetter(*(i - 1 for i in _OFTEN_NULL)))
_NONES = (None,) * len(_OFTEN_NULL)
#: Which ``_OFTEN_NULL`` columns are None (a tuple of bools, one per column) -> those
#: columns' indexes: every pattern, so a row's is looked up, not built in Python.
_NULL_PATTERNS = {
    tuple(bool(mask >> k & 1) for k in range(len(_OFTEN_NULL))): tuple(
        i for k, i in enumerate(_OFTEN_NULL) if mask >> k & 1
    )
    for mask in range(1 << len(_OFTEN_NULL))
}

#: A full stored row: META values (``codec.META_NAMES`` order) then the field values.
StoredRow = tuple[Any, ...]

NOTIFY_CHANNEL = "rv_events"


@dataclass(slots=True)
class AppendRequest:
    """Rows to append to one topic, without their ``_offset`` (assigned on commit).

    Each row is ``(_row_idx, _produced_at, _aggregate_id, ..., *fields)``: the META
    values after ``_offset`` followed by the field values.
    """

    topic: str
    rows: list[tuple[Any, ...]]
    aggregate_id: str | None = None
    expected_version: int | None = None
    command_id: str | None = None
    #: Fail (``AppendConditionError``, nothing lands) if an event matching the condition's
    #: query exists after its position (DCB logs; checked in the appending transaction).
    condition: AppendCondition | None = None
    #: Schedules to store (or cancel) with the rows, in the same transaction or savepoint:
    #: a request that fails or is a duplicate writes none.
    schedules: list[ScheduleWrite] = field(default_factory=list)
    #: The aggregate's snapshot after these rows ``(version, fingerprint, state)``, stored
    #: in the same transaction or savepoint (replacing an older one): no commit of its own.
    snapshot: tuple[int, str, str] | None = None


@dataclass(slots=True)
class AppendResult:
    """Where an append landed. ``duplicate`` is True when its command id was seen before."""

    topic: str
    first_offset: int
    last_offset: int
    rows: list[StoredRow] = field(default_factory=list)
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What the appender needs to know about a topic's table (and its tag index, if the
    topic's events carry tags: written by ``_insert`` in the same transaction)."""

    table: str
    columns: tuple[str, ...]
    pg_types: tuple[str, ...]
    insert_sql: str
    tags: TagIndex | None = None
    #: SQLite: ``_offset`` is the rowid (``INTEGER PRIMARY KEY``), so a lone row inserted
    #: with a NULL offset gets the largest one plus one from SQLite itself.
    rowid_offset: bool = False


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """Where an append that carried a command id landed (a row of ``rv_commands``).

    ``version`` is the aggregate's version after the append. ``first_offset``,
    ``last_offset`` and ``version`` are None for rows written by a store older than these
    columns (and ``version`` for appends without an expected version).
    """

    command_id: str
    topic: str
    aggregate_id: str | None
    first_offset: int | None
    last_offset: int | None
    version: int | None


class DuplicateCommand(Exception):
    """Raised inside an append's transaction when its command id is recorded already, so
    the transaction (or savepoint) undoes what the request wrote."""


def command_sql(db: Database) -> str:
    """Records a command id (its parameter marks depend on the opened driver)."""
    return (
        "INSERT INTO rv_commands (command_id, topic, aggregate_id, first_offset, "
        f"last_offset, version) VALUES ({db.placeholders(6)})"
    )


def command_row(req: AppendRequest, landed: AppendResult) -> tuple[Any, ...]:
    """The ``rv_commands`` row of a request that carries a command id and landed at
    ``landed``'s offsets: a retry of the command is answered from it."""
    version = None if req.expected_version is None else req.expected_version + len(req.rows)
    return (
        req.command_id,
        req.topic,
        req.aggregate_id,
        landed.first_offset,
        landed.last_offset,
        version,
    )


def command_rows(reqs: list[AppendRequest], landed: list[AppendResult]) -> list[tuple[Any, ...]]:
    """The ``rv_commands`` rows of the requests (landed at ``landed``) with a command id."""
    return [command_row(r, res) for r, res in zip(reqs, landed, strict=True) if r.command_id]


def snapshot_sql(db: Database) -> str:
    """Stores a snapshot ``(topic, aggregate_id, version, fingerprint, state)`` unless a
    newer one is stored already."""
    return (
        "INSERT INTO rv_snapshots (topic, aggregate_id, version, fingerprint, state) "
        f"VALUES ({db.placeholders(5)}) ON CONFLICT (topic, aggregate_id) DO UPDATE "
        "SET version = excluded.version, fingerprint = excluded.fingerprint, "
        "state = excluded.state WHERE rv_snapshots.version < excluded.version"
    )


def snapshot_rows(reqs: Iterable[AppendRequest]) -> list[tuple[Any, ...]]:
    """The ``rv_snapshots`` rows the requests carry."""
    return [(r.topic, r.aggregate_id, *r.snapshot) for r in reqs if r.snapshot is not None]


def lock_order(reqs: list[AppendRequest]) -> list[int]:
    """Indexes of ``reqs`` in topic-name order (the order topics are locked in)."""
    return sorted(range(len(reqs)), key=lambda i: reqs[i].topic)


def by_topic(reqs: list[AppendRequest]) -> Iterator[tuple[str, list[AppendRequest], int]]:
    """Runs of requests of one topic (``reqs`` sorted by topic) with their row count."""
    i = 0
    while i < len(reqs):
        topic = reqs[i].topic
        j = i
        while j < len(reqs) and reqs[j].topic == topic:
            j += 1
        yield topic, reqs[i:j], sum(len(r.rows) for r in reqs[i:j])
        i = j


def place(
    topic: str, reqs: list[AppendRequest], first: int
) -> tuple[list[AppendResult], list[StoredRow]]:
    """Give the requests' rows consecutive offsets from ``first``."""
    results: list[AppendResult] = []
    all_rows: list[StoredRow] = []
    add, put = results.append, all_rows.append
    off = first
    for req in reqs:
        if len(req.rows) == 1:  # (one event: the common case of bulk appends)
            row = (off, *req.rows[0])
            add(AppendResult(topic, off, off, [row]))
            put(row)
            off += 1
            continue
        rows = [(off + k, *r) for k, r in enumerate(req.rows)]
        add(AppendResult(topic, off, off + len(rows) - 1, rows))
        off += len(rows)
        all_rows.extend(rows)
    return results, all_rows


class Appender:
    """The SQLite appender; ``table_of`` maps a topic to its table."""

    def __init__(self, db: Database, table_of: Callable[[str], TableInfo]) -> None:
        self.db = db
        self.table_of = table_of
        self._many: dict[tuple[str, int], str] = {}
        #: (table, with the offset, columns left out) -> what ``_lean`` returns
        self._leaner: dict[tuple[str, bool, tuple[int, ...]], tuple[str, Any]] = {}

    def group(self, cur: Any, *, reqs: list[AppendRequest]) -> list[AppendResult | Exception]:
        """Append ``reqs`` in the caller's transaction; clashes fail only their request."""
        if len(reqs) == 1:  # alone: a clash raises (no savepoint to undo it to)
            return [self.one(cur, reqs[0])]
        order = lock_order(reqs)
        results: list[AppendResult | Exception | None] = [None] * len(reqs)
        cur.execute("SAVEPOINT rv_group")
        try:
            for i, res in zip(order, self._all(cur, [reqs[i] for i in order]), strict=True):
                results[i] = res
        except self.db.integrity_errors:
            cur.execute("ROLLBACK TO SAVEPOINT rv_group")
            for i in order:
                results[i] = self._careful(cur, reqs[i])
        cur.execute("RELEASE SAVEPOINT rv_group")
        return [r for r in results if r is not None]

    def _careful(self, cur: Any, req: AppendRequest) -> AppendResult | Exception:
        """One request of a group on its own, in a savepoint: a clash undoes only it."""
        cur.execute("SAVEPOINT rv_one")
        try:
            result: AppendResult | Exception = self.one(cur, req)
        except ConcurrencyError as exc:
            cur.execute("ROLLBACK TO SAVEPOINT rv_one")
            result = exc
        cur.execute("RELEASE SAVEPOINT rv_one")
        return result

    def _first_offset(self, cur: Any, topic: str) -> int:
        cur.execute(f"SELECT MAX(_offset) FROM {self.db.q(self.table_of(topic).table)}")
        return int(cur.fetchone()[0] or 0) + 1

    def _lean(self, info: TableInfo, rows: list[tuple[Any, ...]], offset: bool) -> tuple[str, Any]:
        """The one-row INSERT of ``rows`` (led by their offset, or without it:
        ``offset=False``) that leaves out the ``_OFTEN_NULL`` columns NULL in every row
        (SQLite stores NULL there, as for a bound None), and the getter of the values to
        bind of each row (None: every value)."""
        shift = 0 if offset else 1
        if len(rows) == 1:  # (the per-command hot path: which of them are None, in C)
            gone = _NULL_PATTERNS[tuple(map(is_, _OFTEN_AT[shift](rows[0]), _NONES))]
        else:
            n = len(rows)
            gone = tuple(
                i for i in _OFTEN_NULL if list(map(itemgetter(i - shift), rows)).count(None) == n
            )
        key = (info.table, offset, gone)
        lean = self._leaner.get(key)
        if lean is None:
            if len(self._leaner) >= _STATEMENTS:
                self._leaner.clear()
            at = [i for i in range(shift, len(info.columns)) if i not in gone]
            q = self.db.q
            sql = (
                f"INSERT INTO {q(info.table)} ({', '.join(q(info.columns[i]) for i in at)}) "
                f"VALUES ({self.db.placeholders(len(at))})"
            )
            lean = self._leaner[key] = (sql, itemgetter(*(i - shift for i in at)) if gone else None)
        return lean

    def _insert(self, cur: Any, topic: str, rows: list[StoredRow]) -> None:
        info = self.table_of(topic)
        sql, values = self._lean(info, rows, True)
        bound = rows if values is None else list(map(values, rows))
        if len(rows) == 1:  # a lone command's event: the per-command hot path
            cur.execute(sql, bound[0])
        else:
            self._insert_many(cur, sql, bound)
        if info.tags is not None:  # after the rows: a version clash is reported as such
            index = info.tags.rows(rows)
            if index:
                cur.executemany(info.tags.insert_sql, index)

    def _insert_many(self, cur: Any, sql: str, rows: list[StoredRow]) -> None:
        # Many rows per statement (as many as the bound parameters allow): ~10-15% less
        # CPU per row than one row per step
        per = max(1, _MAX_VARIABLES // len(rows[0]))
        full = len(rows) - len(rows) % per
        flat = chain.from_iterable
        if full:
            many = self._values(sql, per)
            cur.executemany(many, [tuple(flat(rows[i : i + per])) for i in range(0, full, per)])
        if full < len(rows):
            cur.execute(self._values(sql, len(rows) - full), tuple(flat(rows[full:])))

    def one(self, cur: Any, req: AppendRequest) -> AppendResult:
        """Append ``req`` alone in the caller's transaction (a clash raises
        ``ConcurrencyError``; a recorded command id gives a duplicate result)."""
        info = self.table_of(req.topic)
        if (
            info.rowid_offset
            and req.command_id is None
            and len(req.rows) * len(req.rows[0]) <= _MAX_VARIABLES
        ):
            result = self._rowid_rows(cur, req, info)
            if req.schedules or req.snapshot is not None:
                self._extras(cur, [req])
            return result
        [result], rows = place(req.topic, [req], self._first_offset(cur, req.topic))
        if req.command_id is not None:
            # Before the rows: a duplicate is then found with nothing of its own written.
            cur.execute("SAVEPOINT rv_cmd")
            try:
                cur.execute(command_sql(self.db), command_row(req, result))
            except self.db.integrity_errors:
                cur.execute("ROLLBACK TO SAVEPOINT rv_cmd")
                cur.execute("RELEASE SAVEPOINT rv_cmd")
                return AppendResult(req.topic, 0, -1, duplicate=True)
            cur.execute("RELEASE SAVEPOINT rv_cmd")
        try:
            self._insert(cur, req.topic, rows)
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        self._extras(cur, [req])
        return result

    def _extras(self, cur: Any, reqs: list[AppendRequest]) -> None:
        """What the requests store beside their rows: schedules and snapshots."""
        if len(reqs) == 1 and not reqs[0].schedules and reqs[0].snapshot is None:
            return
        for sql, params in write_statements(self.db, (w for r in reqs for w in r.schedules)):
            cur.executemany(sql, params)
        snapshots = snapshot_rows(reqs)
        if snapshots:
            cur.executemany(snapshot_sql(self.db), snapshots)

    def _rowid_rows(self, cur: Any, req: AppendRequest, info: TableInfo) -> AppendResult:
        """A command's rows (the per-command hot path), in one statement that leaves the
        offsets out: SQLite assigns them (the rowid: the largest plus one, and on, as
        ``_first_offset`` would) so no query looks the head up."""
        given = req.rows
        n = len(given)
        one, values = self._lean(info, given, False)
        try:
            if n == 1:  # (a command's one event: no list of rows made and cut again)
                row = given[0]
                cur.execute(one, row if values is None else values(row))
                last: int = cur.lastrowid
                first = last
                rows = [(last, *row)]
            else:
                bound = given if values is None else list(map(values, given))
                cur.execute(self._values(one, n), tuple(chain.from_iterable(bound)))
                last = cur.lastrowid
                first = last - n + 1
                rows = [(first + k, *r) for k, r in enumerate(given)]
            if info.tags is not None:
                index = info.tags.rows(rows)
                if index:
                    cur.executemany(info.tags.insert_sql, index)
        except self.db.integrity_errors:
            raise ConcurrencyError(req.topic, req.aggregate_id, req.expected_version) from None
        return AppendResult(req.topic, first, last, rows)

    def _values(self, sql: str, n: int) -> str:
        """``sql`` (one row's INSERT) inserting ``n`` rows in one statement."""
        if n == 1:
            return sql
        many = self._many.get((sql, n))
        if many is None:
            values = sql[sql.index(" VALUES ") + len(" VALUES ") :]
            if len(self._many) >= _STATEMENTS:  # (one per table, row count and lean shape)
                self._many.clear()
            many = self._many[(sql, n)] = sql + (", " + values) * (n - 1)
        return many

    def _all(self, cur: Any, reqs: list[AppendRequest]) -> list[AppendResult]:
        """Everything at once: one offset lookup and one executemany per topic."""
        results: list[AppendResult] = []
        for topic, run, _ in by_topic(reqs):
            done, rows = place(topic, run, self._first_offset(cur, topic))
            self._insert(cur, topic, rows)
            results += done
        commands = command_rows(reqs, results)
        if commands:
            cur.executemany(command_sql(self.db), commands)
        self._extras(cur, reqs)
        return results
