"""The log of a store read synchronously by URL: what the ``reventless`` Spark data source
runs on the driver (planning: schema, heads, horizons) and in executor tasks (reading an
offset range as Arrow batches). No application code is needed: topics come with the
Arrow schema the store registered (``rv_topics``).

One ``LogReader`` holds one connection (PostgreSQL: one per task; SQLite: the local file,
which must exist: reading never creates a store). Each page is one read transaction
that also checks the retention horizon, so a page never silently misses deleted rows.

Example::

    with LogReader("sqlite:///shop.db") as log:
        info = log.topic("Order")
        head, horizon = log.bounds(info)
        for rows in log.pages(info, horizon + 1, head):
            batch = info.schema.to_arrow(rows)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from ..codec import OFFSET_AT
from ..errors import ResnapshotRequiredError, StoreError, TopicNotFoundError
from ..predicate import And, Compare, Field, Node, Predicate
from ..store import Database
from ..store.catalog import StoredTopic, head_sync, horizon_sync, load_topics_sync, read_sync

__all__ = ["PAGE", "PARTITION", "LogReader"]

#: Rows per page (one read transaction, one Arrow batch).
PAGE = 50_000
#: The partition column as a predicate reads it.
PARTITION = Field("_partition", "_partition", "int")


def _horizon(conn: Any, topic: str) -> int:
    # the retention tables exist once a policy was set (or a collector checked them)
    if not conn.dialect.has_table(conn, "rv_retention"):
        return 0
    return horizon_sync(conn, topic)


class LogReader:
    """A store's topics, heads, horizons and offset ranges, read synchronously (one
    connection, closed by ``close`` or the ``with`` block)."""

    def __init__(self, url: str) -> None:
        db = Database(url)
        if db.is_memory:
            raise StoreError(
                "an in-memory SQLite store cannot be read by Spark (other processes do not "
                "see it): use a SQLite file or PostgreSQL"
            )
        path = db.url.database
        if db.is_sqlite and path and not os.path.isfile(path):
            raise StoreError(f"no store at {path}: the file does not exist")
        db.open_sync()
        self.db = db
        self._topics: dict[str, StoredTopic] | None = None

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self.db.close_sync()

    def topics(self, *, fresh: bool = False) -> dict[str, StoredTopic]:
        """Every registered topic (cached; ``fresh`` reads the catalog again)."""
        if self._topics is None or fresh:
            try:
                self._topics = self.db.read_sync(load_topics_sync)
            except StoreError:
                raise
            except Exception as exc:  # the driver's error: no rv_topics table
                where = self.db.url.render_as_string()
                raise StoreError(f"{where} holds no reventless store: {exc}") from exc
        return self._topics

    def topic(self, name: str, *, fresh: bool = False) -> StoredTopic:
        """A registered topic; ``TopicNotFoundError`` naming the known ones otherwise."""
        topics = self.topics(fresh=fresh)
        if name not in topics:
            known = ", ".join(sorted(topics)) or "none"
            raise TopicNotFoundError(f"the store has no topic {name!r} (topics: {known})")
        return topics[name]

    def bounds(self, info: StoredTopic) -> tuple[int, int]:
        """``(head, horizon)`` in one snapshot: the last committed offset and the last
        offset retention deleted (0: none)."""
        db = self.db
        return db.read_sync(lambda conn: (head_sync(db, conn, info), _horizon(conn, info.name)))

    def pages(
        self,
        info: StoredTopic,
        lo: int,
        hi: int,
        *,
        partition: int | None = None,
        where: Sequence[Node] = (),
        page: int = PAGE,
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Stored rows with ``lo <= _offset <= hi`` (of ``partition``; matching every node
        of ``where``) in offset order, in pages. ``ResnapshotRequiredError`` when retention
        deleted offsets of the range before they were read."""
        nodes = list(where)
        if partition is not None:
            nodes.append(Compare(PARTITION, "=", partition))
        clauses = []
        dialect = "sqlite" if self.db.is_sqlite else "postgresql"
        if nodes:
            node = nodes[0] if len(nodes) == 1 else And(tuple(nodes))
            clauses.append(Predicate("", info.schema, node).sql(dialect))
        start = lo
        while start <= hi:

            def work(conn: Any, start: int = start) -> tuple[int, list[tuple[Any, ...]]]:
                horizon = _horizon(conn, info.name)
                if horizon >= start:
                    return horizon, []
                return horizon, read_sync(conn, info, start, hi, clauses, page)

            horizon, rows = self.db.read_sync(work)
            if horizon >= start:
                raise ResnapshotRequiredError(info.name, start, horizon, partition)
            if rows:
                yield rows
            if len(rows) < page:
                return
            start = int(rows[-1][OFFSET_AT]) + 1
