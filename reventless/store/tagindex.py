"""The tag index of a topic whose events carry tags (``_tags``): one row per (tag, event).

A tagged topic (events declaring ``Tag`` fields, and every DCB log) stores each event's
tags twice: in its ``_tags`` column (JSON text; what Arrow, brokers and Spark carry) and
in its index table ``tg_<topic>`` with primary key ``(tag, _offset)`` and the event type
beside it, written in the transaction that appends the events. The topic's table gets an
index on ``(_type, _offset)`` too. Queries and append conditions (``dcb.py``) read these
indexes: a tag item is a range scan of one tag after a position, a type item a range
scan of one type.

Example::

    index = TagIndex.of(db, topic, "ev_courses")
    cur.executemany(index.insert_sql, index.rows(stored_rows))
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Connection

from ..codec import OFFSET_AT, TYPE_AT
from ..topicdef import TopicDef
from .database import Database, table_name

__all__ = ["TagIndex", "create_tag_index", "drop_tag_index", "tag_table"]


def tag_table(topic: str) -> str:
    """The name of ``topic``'s tag index table."""
    return table_name("tg_", topic)


@dataclass(frozen=True, slots=True)
class TagIndex:
    """The tag index of one tagged topic, as its appenders and readers need it.

    ``guarded``: the topic is a DCB log, whose every append takes the lock keys of its
    events on PostgreSQL (``dcb.py``), so it goes through the DCB path, one request per
    transaction.
    """

    table: str
    topic_table: str
    tags_at: int
    insert_sql: str
    guarded: bool
    quoted: str  # ``table``, quoted for the dialect
    _cte: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, db: Database, topic: TopicDef, topic_table: str) -> TagIndex | None:
        """The tag index of ``topic`` (stored in ``topic_table``); None if it has no tags."""
        at = topic.schema.tags_at
        if at is None:
            return None
        table = tag_table(topic.name)
        sql = f"INSERT INTO {db.q(table)} (tag, _offset, _type) VALUES ({db.placeholders(3)})"
        return cls(table, topic_table, at, sql, topic.kind == "dcb", db.q(table))

    def rows(self, rows: list[Any]) -> list[tuple[str, int, str]]:
        """The index rows of full stored rows (``_offset`` first): one per tag."""
        at, out = self.tags_at, list[tuple[str, int, str]]()
        for r in rows:
            text = r[at]
            if text and text != "[]":
                offset, etype = r[OFFSET_AT], r[TYPE_AT]
                out.extend((tag, offset, etype) for tag in json.loads(text))
        return out

    def pg_cte(self, sql: str) -> str:
        """PostgreSQL: the one-statement append ``sql`` (offsets bumped in a CTE, then the
        INSERT ... RETURNING _offset) extended to write the index rows too, derived from
        the inserted ``_tags`` in the same statement (still one atomic round trip)."""
        out = self._cte.get(sql)
        if out is None:
            head, insert = split_append(sql)
            out = self._cte[sql] = (
                f"{head}), ins AS (INSERT INTO {insert}, _type, _tags), "
                f"tg AS (INSERT INTO {self.quoted} (tag, _offset, _type) "
                "SELECT j.tag, ins._offset, ins._type FROM ins "
                "CROSS JOIN LATERAL json_array_elements_text(ins._tags::json) AS j(tag)) "
                "SELECT _offset FROM ins"
            )
        return out


def split_append(sql: str) -> tuple[str, str]:
    """PostgreSQL's one-statement append ``WITH h AS (...) INSERT INTO ... RETURNING
    _offset`` as its CTE head (without the closing parenthesis) and its INSERT (without
    ``INSERT INTO``): what a caller adds more data-modifying CTEs between."""
    head, sep, insert = sql.partition(") INSERT INTO ")
    if not sep or not insert.endswith(" RETURNING _offset"):
        raise AssertionError(f"unexpected append statement: {sql[:80]}")
    return head, insert


def create_tag_index(db: Database, conn: Connection, topic: TopicDef, topic_table: str) -> None:
    """Create ``topic``'s tag index table and the ``(_type, _offset)`` index of its table
    if missing (inside the caller's DDL transaction); nothing for a topic without tags."""
    if topic.schema.tags_at is None:
        return
    q, table = db.q, tag_table(topic.name)
    if db.is_sqlite:  # WITHOUT ROWID: the primary key is the table, _type read from it
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {q(table)} (tag TEXT NOT NULL, "
            "_offset INTEGER NOT NULL, _type TEXT NOT NULL, PRIMARY KEY (tag, _offset)) "
            "WITHOUT ROWID"
        )
    else:  # INCLUDE: a type filter on a tag's rows needs no heap fetch
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {q(table)} (tag text NOT NULL, "
            "_offset bigint NOT NULL, _type text NOT NULL, "
            f"CONSTRAINT {q('pk_' + table)} PRIMARY KEY (tag, _offset) INCLUDE (_type))"
        )
    conn.exec_driver_sql(
        f"CREATE INDEX IF NOT EXISTS {q('ix_' + topic_table + '_type')} "
        f"ON {q(topic_table)} (_type, _offset)"
    )


def drop_tag_index(db: Database, conn: Connection, topic: str) -> None:
    """Drop ``topic``'s tag index table if there is one (undoing a failed build)."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {db.q(tag_table(topic))}")
