"""Dynamic consistency boundaries in the store: queries by type and tag, and conditional
appends that hold under concurrent writers in many processes.

**Reading.** ``read_query`` selects the events of a topic matching a ``Query`` after a
position, in offset order: a tag item is a range scan of its first tag in the topic's tag
index (``tagindex.py``; its other tags and its types are checked on the index rows), a
type item a range scan of the ``(_type, _offset)`` index, a match-all item the table
itself. All values are bound parameters.

**Conditional append.** A request with an ``AppendCondition`` (and every append to a DCB
log) is never grouped with others: it is one transaction that checks the condition and
appends. If an event matching ``condition.query`` exists after ``condition.after``, it
raises ``AppendConditionError`` (naming the first such position) and nothing lands.
The check is one statement of index range scans (one per tag item, per type of a type
item) that each stop at the first match.

**Locking.** The check and the append must be atomic against every writer that could add
a matching event:

- SQLite serialises writers (``BEGIN IMMEDIATE``): the check runs inside the write
  transaction, so nothing can land between the check and the append.
- PostgreSQL takes transaction-scoped advisory locks on *lock keys*, 64-bit hashes of
  (topic, tag) and (topic, event type). A writer to a DCB log takes the keys of the
  events it writes, every tag and the type of each, in SHARED mode; a conditional append
  takes, per query item, one key in EXCLUSIVE mode: the item's first tag if it has tags
  (every matching event carries it), else each of its types. All keys of a transaction
  are taken in one statement in ascending key order (no deadlock between two appends),
  before the topic's counter row. Then the condition is checked, then the counter row is
  bumped and the rows written. So a checker waits for the writers in flight of the keys
  it checks and holds off new ones until it commits, and its check sees everything they
  wrote; writers of the same keys do not wait for each other, and appends with disjoint
  keys never wait for each other's checks (they meet only at the counter row, held from
  the bump to the commit, as for every append to one topic). A match-all item (no types,
  no tags) locks the counter row before its check instead: it waits for every writer.

Example::

    rows = await read_query(db, select_sql, info, Query.of(tags=["course:c1"]), after=0)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..codec import TYPE_AT
from ..errors import AppendConditionError, StoreError
from ..tags import AppendCondition, Query, QueryItem
from .append import Appender, AppendRequest, AppendResult, StoredRow, TableInfo
from .database import Database

if TYPE_CHECKING:
    from .pgasync import AsyncAppender

__all__ = [
    "DcbAppends",
    "condition_keys",
    "cursor_run",
    "first_match",
    "guarded",
    "lock_keys",
    "pg_guard",
    "query_sql",
    "write_keys",
]

#: Appends to DCB logs in flight at once per process on PostgreSQL (one connection each).
_PG_CONNECTIONS = 4


def _key(topic: str, kind: str, value: str) -> int:
    """A lock key: a stable signed 64-bit hash (the same in every process)."""
    digest = hashlib.blake2b(f"{kind}\0{topic}\0{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def write_keys(topic: str, rows: Sequence[Sequence[Any]], tags_at: int) -> set[int]:
    """The lock keys of the rows of an append request (no ``_offset`` yet: every column
    index is one less than in a stored row): each row's tags and type."""
    keys: set[int] = set()
    for r in rows:
        keys.add(_key(topic, "type", r[TYPE_AT - 1]))
        text = r[tags_at - 1]
        if text and text != "[]":
            keys.update(_key(topic, "tag", t) for t in json.loads(text))
    return keys


def condition_keys(topic: str, query: Query) -> tuple[set[int], bool]:
    """The lock keys a condition on ``query`` takes, and whether an item matches every
    event (then the topic's counter row is locked instead)."""
    keys: set[int] = set()
    whole = False
    for item in query.items:
        if item.tags:
            keys.add(_key(topic, "tag", item.tags[0]))
        elif item.types:
            keys.update(_key(topic, "type", t) for t in item.types)
        else:
            whole = True
    return keys, whole


#: Lock calls per statement (PostgreSQL allows at most 1664 entries in a SELECT list).
_LOCKS_PER_STATEMENT = 1000


def lock_keys(shared: set[int], exclusive: set[int]) -> list[tuple[str, list[int]]]:
    """The statements taking the advisory locks in ascending key order (exclusive wins
    over shared for a key in both), each with its parameters; empty when there are none.
    Keys are taken up to ``_LOCKS_PER_STATEMENT`` per statement, still in one order."""
    keys = sorted(shared | exclusive)
    out: list[tuple[str, list[int]]] = []
    for i in range(0, len(keys), _LOCKS_PER_STATEMENT):
        chunk = keys[i : i + _LOCKS_PER_STATEMENT]
        calls = [
            f"pg_advisory_xact_lock{'' if k in exclusive else '_shared'}(%s::bigint)" for k in chunk
        ]
        out.append(("SELECT " + ", ".join(calls), chunk))
    return out


def dcb_log(info: TableInfo) -> bool:
    """Whether the topic of ``info`` is a DCB log (its appends are guarded)."""
    return info.tags is not None and info.tags.guarded


def guarded(req: AppendRequest, info: TableInfo) -> bool:
    """Whether ``req`` goes through the DCB path (a condition, or a DCB log)."""
    return req.condition is not None or dcb_log(info)


# -- SQL ---------------------------------------------------------------------------------


def _item_sql(
    db: Database, info: TableInfo, item: QueryItem, after: int, first: bool
) -> tuple[str, list[Any]] | None:
    """The offsets an item matches after ``after`` (``first``: only the first one, as a
    scalar subquery per index scan joined by commas); None if it can match nothing."""
    mark, q = db.mark, db.q
    limit = " ORDER BY _offset LIMIT 1" if first else ""
    if item.tags:
        if info.tags is None:  # a topic without tags: no event carries one
            return None
        head, *rest = item.tags
        sql = f"SELECT t0._offset FROM {info.tags.quoted} t0 WHERE t0.tag = {mark} "
        sql += f"AND t0._offset > {mark}"
        params: list[Any] = [head, after]
        if item.types:
            sql += f" AND t0._type IN ({db.placeholders(len(item.types))})"
            params += item.types
        for i, tag in enumerate(rest, 1):
            sql += (
                f" AND EXISTS (SELECT 1 FROM {info.tags.quoted} t{i} WHERE t{i}.tag = {mark} "
                f"AND t{i}._offset = t0._offset)"
            )
            params.append(tag)
        if not first:  # a read joins the topic's rows anyway
            return sql, params
        # the event itself must still be there: retention deletes rows, not their index rows
        sql += f" AND EXISTS (SELECT 1 FROM {q(info.table)} e WHERE e._offset = t0._offset)"
        return f"({sql} ORDER BY t0._offset LIMIT 1)", params
    table = q(info.table)
    if not item.types:
        sql = f"SELECT _offset FROM {table} WHERE _offset > {mark}"
        return (f"({sql}{limit})" if first else sql), [after]
    if not first:
        marks = db.placeholders(len(item.types))
        return f"SELECT _offset FROM {table} WHERE _type IN ({marks}) AND _offset > {mark}", [
            *item.types,
            after,
        ]
    one = f"(SELECT _offset FROM {table} WHERE _type = {mark} AND _offset > {mark}{limit})"
    return ", ".join([one] * len(item.types)), [x for t in item.types for x in (t, after)]


def first_match(db: Database, info: TableInfo, cond: AppendCondition) -> tuple[str, list[Any]]:
    """One statement whose row holds, per index scan, the first matching offset after the
    condition's position (NULL: none); ``("", [])`` for a query without items."""
    parts, params = [], []
    for item in cond.query.items:
        got = _item_sql(db, info, item, cond.after, first=True)
        if got is not None:
            parts.append(got[0])
            params += got[1]
    return ("SELECT " + ", ".join(parts), params) if parts else ("", [])


def query_sql(
    db: Database, select_sql: str, info: TableInfo, query: Query, after: int, limit: int | None
) -> tuple[str, list[Any]] | None:
    """The statement reading the rows matching ``query`` after ``after`` in offset order
    (``select_sql``: the topic's ``SELECT <columns> FROM <table>``); None: nothing can
    match."""
    mark = db.mark
    tail = " ORDER BY _offset" + ("" if limit is None else f" LIMIT {int(limit)}")
    subs = [_item_sql(db, info, item, after, first=False) for item in query.items]
    found = [s for s in subs if s is not None]
    if not found:
        return None
    if any(not i.tags and not i.types for i in query.items):  # every event after ``after``
        return f"{select_sql} WHERE _offset > {mark}{tail}", [after]
    union = " UNION ".join(s for s, _ in found)
    params = [p for _, ps in found for p in ps]
    return f"{select_sql} WHERE _offset > {mark} AND _offset IN ({union}){tail}", [after, *params]


def _failed(topic: str, cond: AppendCondition, row: Sequence[Any] | None) -> None:
    found = [int(v) for v in row or () if v is not None]
    if found:
        raise AppendConditionError(topic, cond.query, cond.after, min(found))


def sqlite_check(cur: Any, db: Database, info: TableInfo, req: AppendRequest) -> None:
    """SQLite: check ``req``'s condition inside its write transaction (writers are
    serialised, so nothing lands between the check and the append)."""
    if req.condition is None:
        return
    sql, params = first_match(db, info, req.condition)
    if sql:
        cur.execute(sql, params)
        _failed(req.topic, req.condition, cur.fetchone())


#: Runs one statement (``%s`` placeholders) in the open transaction: its rows.
Run = Callable[[str, Sequence[Any]], Awaitable[list[tuple[Any, ...]]]]


def cursor_run(cur: Any) -> Run:
    """``Run`` on a psycopg async cursor."""

    async def run(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        await cur.execute(sql, params)
        return list(await cur.fetchall()) if cur.description is not None else []

    return run


async def pg_guard(run: Run, db: Database, info: TableInfo, req: AppendRequest) -> None:
    """PostgreSQL, first thing in ``req``'s transaction: take the lock keys (shared: the
    events' own; exclusive: the condition's), then check the condition (see the module).
    ``run``: how a statement is sent in that transaction (a cursor's, or libpq's own)."""
    cond = req.condition
    shared: set[int] = set()
    if info.tags is not None and dcb_log(info):
        shared = write_keys(req.topic, req.rows, info.tags.tags_at)
    exclusive, whole = condition_keys(req.topic, cond.query) if cond is not None else (set(), False)
    for sql, keys in lock_keys(shared, exclusive):
        await run(sql, keys)
    if cond is None:
        return
    if whole:  # waits for every writer of the topic (they hold it from bump to commit)
        await run("SELECT head FROM rv_topics WHERE name = %s FOR UPDATE", (req.topic,))
    sql, params = first_match(db, info, cond)
    if sql:
        got = await run(sql, params)
        _failed(req.topic, cond, got[0] if got else None)


# -- the DCB append path -----------------------------------------------------------------


class DcbAppends:
    """Appends that go through the DCB path (``guarded``): each in its own transaction.

    SQLite: on the writer (or the caller's) thread like any append, the condition checked
    first. PostgreSQL: up to ``_PG_CONNECTIONS`` such appends run at once, each on its own
    connection, so one waiting for a lock key holds up neither the other appends of the
    process nor DCB appends with other keys.

    Example::

        result = await DcbAppends(db, table_of, appender, None).append(request)
    """

    def __init__(
        self,
        db: Database,
        table_of: Callable[[str], TableInfo],
        appender: Appender,
        connect: Callable[[], AsyncAppender] | None,
    ) -> None:
        self.db = db
        self.table_of = table_of
        self.appender = appender
        self._connect = connect
        self._idle: list[AsyncAppender] = []
        self._open: list[AsyncAppender] = []
        self._free = asyncio.Semaphore(_PG_CONNECTIONS)

    async def append(self, req: AppendRequest) -> AppendResult:
        """Check ``req``'s condition and append it in one transaction; raises
        ``AppendConditionError`` (nothing lands) when the condition fails."""
        info = self.table_of(req.topic)
        if req.condition is not None and not dcb_log(info):
            raise StoreError(
                f"topic {req.topic!r}: conditional appends are for DCB logs (App.dcb_log)"
            )
        if self._connect is not None:
            return await self._pg(req)

        def work(cur: Any) -> AppendResult:
            sqlite_check(cur, self.db, info, req)
            [out] = self.appender.group(cur, reqs=[req])
            if isinstance(out, Exception):  # pragma: no cover - one request raises instead
                raise out
            return out

        if self.db.try_inline_write():
            return self.db.write_raw_sync(work, locked=True)
        return await self.db.write_raw(work)

    async def _pg(self, req: AppendRequest) -> AppendResult:
        assert self._connect is not None
        async with self._free:
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._connect()
                self._open.append(conn)
            try:
                [out] = await conn.group([req])
            finally:
                self._idle.append(conn)
        if isinstance(out, Exception):  # pragma: no cover - one request raises instead
            raise out
        return out

    async def close(self) -> None:
        """Close the PostgreSQL connections."""
        opened, self._open, self._idle = self._open, [], []
        for conn in opened:
            await conn.close()


async def read_query(
    db: Database,
    select_sql: str,
    info: TableInfo,
    query: Query,
    *,
    after: int = 0,
    limit: int | None = None,
    rows: Callable[[str, Sequence[Any]], Awaitable[list[StoredRow]]] | None = None,
) -> list[StoredRow]:
    """The rows of the topic matching ``query`` after position ``after``, in offset order
    (at most ``limit``). ``rows``: what runs the statement (PostgreSQL's libpq reads from
    the event loop), else a reader thread."""
    if not isinstance(query, Query):
        raise StoreError(f"read_query takes a Query, got {query!r}")
    for name, value in (("after", after), ("limit", 0 if limit is None else limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StoreError(f"read_query: {name} must be an int >= 0, got {value!r}")
    built = query_sql(db, select_sql, info, query, after, limit)
    if built is None or limit == 0:
        return []
    sql, params = built
    if rows is not None:
        return await rows(sql, params)

    def work(conn: Any) -> list[StoredRow]:
        cur = conn.connection.dbapi_connection.cursor()
        cur.execute(sql, tuple(params))
        return [tuple(r) for r in cur.fetchall()]

    return await db.read(work)
