"""Outbox relay positions: per topic, the last offset published to the broker.

``rv_relay`` is shared by every process on the store: a relay adopts the positions the
others record, and a position only ever moves forward.

Example::

    positions = SqlRelayPositions(db)
    got = await positions.start(["Order", "Customer"])   # a new topic starts at its head
    await positions.advance({"Order": 42})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from sqlalchemy.engine import Connection

from . import tables
from .database import Database
from .tables import insert_ignore


class RelayPositions(Protocol):
    """Where the outbox relay stands per topic."""

    async def start(self, topics: Sequence[str]) -> dict[str, int]:
        """The positions of ``topics``; a topic without one starts at its head now."""
        ...

    async def shared(self) -> dict[str, int]:
        """Every recorded position (other processes' relays included)."""
        ...

    async def advance(self, positions: Mapping[str, int]) -> None:
        """Record positions; one that another relay moved further stays where it is."""
        ...


class SqlRelayPositions:
    """``RelayPositions`` in ``rv_relay``."""

    def __init__(self, db: Database, heads: Callable[[Connection], dict[str, int]]) -> None:
        self.db, self._heads = db, heads

    def _positions(self, conn: Connection) -> dict[str, int]:
        sql = 'SELECT topic, "offset" FROM rv_relay'
        return {str(t): int(o) for t, o in conn.exec_driver_sql(sql).all()}

    async def start(self, topics: Sequence[str]) -> dict[str, int]:
        def work(conn: Connection) -> dict[str, int]:
            got = self._positions(conn)
            missing = [n for n in topics if n not in got]
            if missing:
                heads = self._heads(conn)
                # another process starting at once may insert a topic's row first
                insert_ignore(
                    conn, tables.relay, [{"topic": n, "offset": heads.get(n, 0)} for n in missing]
                )
            return self._positions(conn) if missing else got

        return await self.db.write(work)

    async def shared(self) -> dict[str, int]:
        return await self.db.read(self._positions)

    async def advance(self, positions: Mapping[str, int]) -> None:
        mark = self.db.mark
        sql = f'UPDATE rv_relay SET "offset" = {mark} WHERE topic = {mark} AND "offset" < {mark}'
        params = [(o, t, o) for t, o in positions.items()]
        await self.db.write(lambda conn: conn.exec_driver_sql(sql, params))
