"""Tables of subscriptions, consumer-group leases and retention (created by
``Subscriptions.open``; the horizons table also by collectors that check it)."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

#: Durable subscriptions: a topic, an optional predicate/projection/type filter, the tenant
#: it is scoped to, its state (active/paused/closed) and the acked offset.
subscriptions = sa.Table(
    "rv_subscriptions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("topic", sa.String(200), nullable=False),
    sa.Column("predicate", sa.Text),
    sa.Column("columns", sa.Text),  # JSON list of user-facing column names
    sa.Column("types", sa.Text),  # JSON list of event types
    sa.Column("tenant", sa.String(200)),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("acked", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

#: Consumer-group leases: one row per topic partition of a subscription. ``epoch`` grows
#: with every change of owner and fences acks; ``acked`` is the partition's cursor.
partitions = sa.Table(
    "rv_sub_partitions",
    metadata,
    sa.Column("subscription_id", sa.String(64), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("owner", sa.String(200)),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("acked", sa.BigInteger, nullable=False),
)

#: Live members of a subscription's consumer group (their heartbeats).
workers = sa.Table(
    "rv_sub_workers",
    metadata,
    sa.Column("subscription_id", sa.String(64), primary_key=True),
    sa.Column("worker", sa.String(200), primary_key=True),
    sa.Column("expires_at", sa.Double, nullable=False),
)

#: Retention policy per topic and the horizon: every offset up to it has been deleted.
retention = sa.Table(
    "rv_retention",
    metadata,
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("max_age", sa.Double),  # seconds
    sa.Column("max_count", sa.BigInteger),
    sa.Column("horizon", sa.BigInteger, nullable=False),
)

#: Per topic partition: the last deleted offset of that partition (a partition cursor at
#: or past it lost nothing).
horizons = sa.Table(
    "rv_retention_horizons",
    metadata,
    sa.Column("topic", sa.String(200), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("horizon", sa.BigInteger, nullable=False),
)
