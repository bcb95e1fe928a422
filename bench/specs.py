"""The same tiny domain (a counter and a per-counter totals view) for every contender."""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import singledispatchmethod
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate as EsAggregate
from eventsourcing.domain import event
from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection as EsProjection
from eventsourcing.sqlite import SQLiteTrackingRecorder
from psycopg.sql import SQL, Identifier
from pydantic import BaseModel

import reventless as rv

# -- reventless -------------------------------------------------------------------------------


class Incremented(rv.Event):
    by: int = 1


class Increment(rv.Command):
    by: int = 1


class Counter(rv.Aggregate):
    events = Incremented
    value: int = 0

    @rv.handles(Increment)
    def increment(self, cmd: Increment) -> Incremented:
        if cmd.by <= 0:
            raise rv.Rejected("bad_amount", f"cannot increment by {cmd.by}")
        return Incremented(by=cmd.by)

    @rv.applies(Incremented)
    def _inc(self, e: Incremented) -> None:
        self.value += e.by


class Total(BaseModel):
    id: str
    value: int
    events: int


totals: rv.ReadModel[Total] = rv.ReadModel("counter_totals", row=Total, key="id")


@totals.on(Incremented)
def _total(ev: rv.Envelope[Incremented], current: Total | None) -> rv.Upsert[Total]:
    assert ev.aggregate_id is not None
    row = current or Total(id=ev.aggregate_id, value=0, events=0)
    return rv.Upsert(Total(id=row.id, value=row.value + ev.event.by, events=row.events + 1))


class FoldTotal(BaseModel):
    id: str
    value: int = 0
    events: int = 0


#: The same view declared as column upserts: the collector folds it from stored rows.
totals_fold: rv.ReadModel[FoldTotal] = rv.ReadModel("counter_totals_fold", row=FoldTotal, key="id")
rv.ColumnUpserts(totals_fold).on(Incremented, add={"value": "by", "events": 1})

VIEWS: dict[str, rv.ReadModel[Any]] = {"handler": totals, "fold": totals_fold}


# -- eventsourcing ----------------------------------------------------------------------------


class EsCounter(EsAggregate):
    def __init__(self) -> None:
        self.value = 0

    @event("Incremented")
    def increment(self, by: int) -> None:
        self.value += by


class EsApp(Application):
    """No snapshots."""

    name = "Counters"


class EsSnapApp(Application):
    """Snapshot every 100 versions (taken automatically by ``save``)."""

    name = "Counters"
    snapshotting_intervals = {EsCounter: 100}


class TotalsRecorder(TrackingRecorder, ABC):
    """The materialised view of the peer projection (interface)."""

    @abstractmethod
    def incr(self, aggregate_id: str, by: int, tracking: Tracking) -> None: ...

    @abstractmethod
    def rows(self) -> list[tuple[str, int, int]]: ...


class SQLiteTotalsRecorder(TotalsRecorder, SQLiteTrackingRecorder):
    """Totals table + tracking record, written in one transaction per event."""

    def construct_create_table_statements(self) -> list[str]:
        return [
            *super().construct_create_table_statements(),
            "CREATE TABLE IF NOT EXISTS counter_totals "
            "(id TEXT PRIMARY KEY, value INTEGER NOT NULL, events INTEGER NOT NULL)",
        ]

    def incr(self, aggregate_id: str, by: int, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                "INSERT INTO counter_totals (id, value, events) VALUES (?, ?, 1) "
                "ON CONFLICT (id) DO UPDATE SET value = value + excluded.value, "
                "events = events + 1",
                (aggregate_id, by),
            )
            self._insert_tracking(c, tracking)

    def rows(self) -> list[tuple[str, int, int]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute("SELECT id, value, events FROM counter_totals")
            return [tuple(r) for r in c.fetchall()]  # type: ignore[misc]


class PostgresTotalsRecorder(TotalsRecorder, PostgresTrackingRecorder):
    """The same view on PostgreSQL: upsert + tracking record in one transaction per event."""

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        table = SQL("{0}.{1}").format(
            Identifier(self.datastore.schema), Identifier("counter_totals")
        )
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {0} "
                "(id text PRIMARY KEY, value bigint NOT NULL, events bigint NOT NULL)"
            ).format(table)
        )
        self.incr_statement = SQL(
            "INSERT INTO {0} AS t (id, value, events) VALUES (%s, %s, 1) "
            "ON CONFLICT (id) DO UPDATE SET value = t.value + excluded.value, "
            "events = t.events + 1"
        ).format(table)
        self.rows_statement = SQL("SELECT id, value, events FROM {0}").format(table)

    def incr(self, aggregate_id: str, by: int, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(self.incr_statement, (aggregate_id, by), prepare=True)
            self._insert_tracking(c, tracking)

    def rows(self) -> list[tuple[str, int, int]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(self.rows_statement)
            return [(r["id"], r["value"], r["events"]) for r in c.fetchall()]


class TotalsProjection(EsProjection):  # type: ignore[type-arg]
    name = "counter_totals"

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)  # e.g. EsCounter.Created: only move the position

    @process_event.register(EsCounter.Incremented)  # type: ignore[attr-defined]
    def _(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.incr(str(domain_event.originator_id), domain_event.by, tracking)
