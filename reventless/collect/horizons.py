"""Collectors and retention: the horizon below which a partition's events were deleted.

A catch-up read checks the partition's horizon (``rv_sub_horizons``, written by
``reventless.subscribe.Retention``): a checkpoint behind it means events were deleted
unprocessed, and the partition stops in ``resnapshot_required`` instead of skipping them.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..store.database import Database

log = logging.getLogger("reventless.collect")


async def ensure_table(db: Database) -> None:
    """Create the retention horizons table if missing (catch-up reads check it)."""
    from ..subscribe.tables import horizons  # lazily: reventless.subscribe loads sqlglot

    def create(conn: Connection) -> None:
        db.serialize_ddl(conn)
        horizons.create(conn, checkfirst=True)

    await db.write(create)  # serialize_ddl: processes starting at once take turns


async def past(db: Database, component: str, key: tuple[str, int], checkpoint: int) -> int | None:
    """The horizon of partition ``key`` if retention deleted events after ``checkpoint``
    (logged as an error: the partition must stop), else None."""
    from ..subscribe.tables import horizons

    topic, partition = key
    stmt = sa.select(horizons.c.horizon).where(
        horizons.c.topic == topic, horizons.c.partition == partition
    )
    found = await db.read(lambda conn: conn.execute(stmt).scalar())
    if found is None or int(found) <= checkpoint:
        return None
    log.error(
        "collector %s: retention deleted topic %s partition %d up to offset %d, past its "
        "checkpoint %d: the partition is stopped (resnapshot required: rebuild the "
        "state, then accept_resnapshot())",
        component,
        topic,
        partition,
        int(found),
        checkpoint,
    )
    return int(found)
