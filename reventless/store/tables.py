"""System tables shared by every reventless store (created on open, idempotently)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

metadata = sa.MetaData()

#: One row per topic: its backing table, schema fingerprint, tenant pin and head offset.
#: ``head`` is the per-topic counter row: appenders bump it inside their transaction,
#: so offsets are gapless (a rollback un-bumps it) and commit in offset order.
topics = sa.Table(
    "rv_topics",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("table_name", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("arrow_schema", sa.Text, nullable=False),
    sa.Column("tenant", sa.String(200)),
    sa.Column("partitions", sa.Integer, nullable=False),
    sa.Column("head", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

#: Aggregate snapshots: the latest state per aggregate, tagged with the state schema.
snapshots = sa.Table(
    "rv_snapshots",
    metadata,
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("aggregate_id", sa.String(400), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("state", sa.Text, nullable=False),
)

#: Processed command ids: an append carrying a command id lands at most once, and a
#: retry is answered from its row (the offsets it landed at, the aggregate's version
#: after it). Written in the appending transaction. The last three columns were added
#: later: ``upgrade_sync`` adds them to older stores, whose rows keep NULLs there.
commands = sa.Table(
    "rv_commands",
    metadata,
    sa.Column("command_id", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("aggregate_id", sa.String(400)),
    sa.Column("first_offset", sa.BigInteger),
    sa.Column("last_offset", sa.BigInteger),
    sa.Column("version", sa.BigInteger),
)

#: System tables that gained (nullable) columns after their first release.
_GROWN = (commands,)

#: Collector checkpoints: per topic partition, the last offset a component has processed
#: (every earlier event of that partition is done).
checkpoints = sa.Table(
    "rv_checkpoints",
    metadata,
    sa.Column("component", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
)

#: Leased collector groups (``CollectorOptions(group="leased")``): one row per component
#: topic partition with its owner (a worker id; NULL when free), the lease expiry (seconds
#: since the epoch, by the store's clock) and ``epoch``, which grows with every change of
#: owner and fences the partition's checkpoint commits.
collector_leases = sa.Table(
    "rv_collector_leases",
    metadata,
    sa.Column("component", sa.String(200), primary_key=True),
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
)

#: Live members of leased collector groups (their heartbeats): the fair share of each is
#: the partitions divided by the members whose row has not expired.
collector_members = sa.Table(
    "rv_collector_members",
    metadata,
    sa.Column("component", sa.String(200), primary_key=True),
    sa.Column("worker", sa.String(200), primary_key=True),
    sa.Column("expires_at", sa.Double, nullable=False),
)

#: Dead letters: events a component gave up on, parked per aggregate until redriven.
dead_letters = sa.Table(
    "rv_dead_letters",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("component", sa.String(200), nullable=False, index=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("aggregate_id", sa.String(400)),
    sa.Column("msg_id", sa.String(64), nullable=False),
    sa.Column("event_type", sa.String(200), nullable=False),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("component", "topic", "offset", name="uq_rv_dead_letters_event"),
)

#: Outbox relay position per topic: everything up to ``offset`` has been published.
relay = sa.Table(
    "rv_relay",
    metadata,
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
)

#: Read-model tables and the row-schema fingerprint they were built with.
read_models = sa.Table(
    "rv_read_models",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("table_name", sa.String(64), nullable=False),
    sa.Column("fingerprint", sa.String(64), nullable=False),
)


def insert_ignore(conn: Connection, table: sa.Table, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``table``, skipping those whose key exists (``ON CONFLICT DO
    NOTHING`` on PostgreSQL and SQLite)."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(table).on_conflict_do_nothing(), rows)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(table).on_conflict_do_nothing(), rows)


def upgrade_sync(conn: Connection) -> None:
    """Add the columns a store created by an earlier version lacks (after ``create_all``,
    inside ``Database.serialize_ddl``, so processes opening at once take turns)."""
    inspector = sa.inspect(conn)
    quote = conn.dialect.identifier_preparer.quote
    for table in _GROWN:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for col in table.columns:
            if col.name not in have:
                kind = col.type.compile(dialect=conn.dialect)
                conn.exec_driver_sql(
                    f"ALTER TABLE {quote(table.name)} ADD COLUMN {quote(col.name)} {kind}"
                )
