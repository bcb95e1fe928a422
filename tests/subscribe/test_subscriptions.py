"""Durable subscriptions on SQLite and PostgreSQL: lifecycle, persistence, bad input,
tenant scoping, injection attempts and retention. Every claim is checked in the store."""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

import reventless as rv
from reventless.subscribe import (
    AckBeyondHeadError,
    BadRequestError,
    PredicateError,
    ResnapshotRequiredError,
    Retention,
    SubscriptionNotFoundError,
    Subscriptions,
    TopicNotFoundError,
)
from tests.subscribe.conftest import order_rows, orders_app


async def _snapshot(subs: Subscriptions) -> dict[str, Any]:
    """Every table and its row count, plus the subscriptions' rows."""

    def work(conn: sa.Connection) -> dict[str, Any]:
        names = sorted(sa.inspect(conn).get_table_names())
        out: dict[str, Any] = {
            n: conn.execute(sa.text(f'SELECT COUNT(*) FROM "{n}"')).scalar() for n in names
        }
        out["subs"] = [tuple(r) for r in conn.execute(sa.text("SELECT * FROM rv_subscriptions"))]
        return out

    return await subs.db.read(work)


async def test_poll_ack_and_resume_after_a_restart(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app:
        await topic.publish(order_rows(10))
        async with Subscriptions.from_url(db_url) as subs:
            sub = await subs.create("orders", where="qty >= 3 AND flag = TRUE", columns=["qty"])
            page = await subs.poll(sub.id, limit=2)
            assert [e["data"]["qty"] for e in page.events] == [4, 6]
            assert set(page.events[0]) == {"offset", "data"}  # the projection
            assert page.next_offset == page.events[-1]["offset"] + 1
            assert await subs.ack(sub.id, page.events[-1]["offset"]) == 7
        async with Subscriptions.from_url(db_url) as subs:  # a new process, same store
            page = await subs.poll(sub.id, limit=10)
            assert [e["data"]["qty"] for e in page.events] == [8]
            assert page.next_offset == 11 and page.head == 10 and page.lag == 3
            assert (await subs.status(sub.id)).subscription.acked == 7
            await topic.publish(order_rows(2, start=10))
            page = await subs.poll(sub.id, from_offset=page.next_offset)
            assert [e["data"]["qty"] for e in page.events] == [10]
            assert page.next_offset == 13


async def test_pause_delivers_nothing_but_reports_lag_and_close_forgets(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, Subscriptions(app.store.db) as subs:
        await topic.publish(order_rows(5))
        sub = await subs.create("orders", types=["orders"])
        await subs.pause(sub.id)
        page = await subs.poll(sub.id)
        assert page.events == [] and page.state == "paused" and page.lag == 5
        status = await subs.status(sub.id)
        assert (status.subscription.state, status.lag) == ("paused", 5)
        await subs.resume(sub.id)
        assert len((await subs.poll(sub.id)).events) == 5
        await subs.close(sub.id)
        with pytest.raises(SubscriptionNotFoundError):
            await subs.poll(sub.id)
        none = await subs.create("orders", types=["NoSuchType"])
        page = await subs.poll(none.id)
        assert page.events == [] and page.next_offset == 6


async def test_bad_input_is_refused_and_changes_nothing(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, Subscriptions(app.store.db) as subs:
        await topic.publish(order_rows(3))
        sub = await subs.create("orders", tenant="acme")
        await subs.ack(sub.id, 1, tenant="acme")
        before = await _snapshot(subs)
        with pytest.raises(AckBeyondHeadError):
            await subs.ack(sub.id, 4)
        for limit in (0, -1, 10_001):
            with pytest.raises(BadRequestError):
                await subs.poll(sub.id, limit=limit)
        with pytest.raises(BadRequestError):
            await subs.poll(sub.id, from_offset=-2)
        with pytest.raises(SubscriptionNotFoundError):
            await subs.poll("nope")
        with pytest.raises(SubscriptionNotFoundError):  # another tenant's subscription
            await subs.ack(sub.id, 2, tenant="globex")
        with pytest.raises(SubscriptionNotFoundError):
            await subs.pause(sub.id, tenant="globex")
        with pytest.raises(PredicateError):
            await subs.create("orders", where="qty >")
        with pytest.raises(PredicateError):
            await subs.create("orders", where="missing = 1")
        with pytest.raises(BadRequestError):
            await subs.create("orders", columns=["qty", "nope"])
        with pytest.raises(BadRequestError):
            await subs.create("orders", from_offset=9)
        with pytest.raises(TopicNotFoundError):
            await subs.create("nope")
        assert await _snapshot(subs) == before
        assert (await subs.get(sub.id)).acked == 1


INJECTIONS = [
    "qty = 1; DROP TABLE ev_orders",
    "qty = 1 OR 1=1; DELETE FROM rv_topics",
    "name = 'x'); DROP TABLE rv_subscriptions; --",
    "qty = (DELETE FROM ev_orders RETURNING 1)",
    "name = 'x' UNION SELECT * FROM rv_topics",
    "ev_orders.qty = 1",
    "qty IN (SELECT _offset FROM ev_orders)",
]


async def test_injection_attempts_change_nothing(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, Subscriptions(app.store.db) as subs:
        await topic.publish(order_rows(4))
        before = await _snapshot(subs)
        for text in INJECTIONS:
            with pytest.raises(PredicateError):
                await subs.create("orders", where=text)
        assert await _snapshot(subs) == before
        # hostile text inside a literal is data: bound, matched against, never executed
        evil = "'; DROP TABLE ev_orders; --"
        sub = await subs.create("orders", where=f"name = '{evil.replace(chr(39), chr(39) * 2)}'")
        assert (await subs.poll(sub.id)).events == []
        await topic.publish(rv_rows(evil))
        page = await subs.poll(sub.id)
        assert [e["data"]["name"] for e in page.events] == [evil]
        after = await _snapshot(subs)
        assert after["ev_orders"] == before["ev_orders"] + 1
        assert {k for k in after if k != "subs"} == {k for k in before if k != "subs"}


def rv_rows(name: str) -> Any:
    rows = order_rows(1, start=100)
    return rows.set_column(rows.schema.get_field_index("name"), "name", [[name]])


async def test_a_tenant_never_sees_another_tenants_events(db_url: str) -> None:
    app, topic = orders_app(db_url)
    async with app, Subscriptions(app.store.db) as subs:
        await topic.publish(order_rows(3), meta=rv.Metadata(tenant="acme"))
        await topic.publish(order_rows(3, start=3), meta=rv.Metadata(tenant="globex"))
        mine = await subs.create("orders", tenant="acme", where="qty >= 0")
        page = await subs.poll(mine.id, tenant="acme")
        assert [e["tenant"] for e in page.events] == ["acme"] * 3
        assert page.next_offset == 7  # scanned past globex's events without returning them
        assert [s.id for s in await subs.list(tenant="globex")] == []


async def test_retention_deletes_in_bulk_and_cursors_behind_get_resnapshot(db_url: str) -> None:
    app, topic = orders_app(db_url, partitions=2)
    async with app, Subscriptions(app.store.db) as subs:
        retention = Retention(app.store.db)
        await topic.publish(order_rows(20))
        sub = await subs.create("orders")
        await subs.ack(sub.id, 2)
        await retention.set("orders", max_count=5)
        assert (await subs.status(sub.id)).resnapshot_distance == 2
        assert await retention.apply() == {"orders": 15}
        assert [e.offset for e in await topic.read(1, 100)] == [16, 17, 18, 19, 20]
        with pytest.raises(ResnapshotRequiredError) as err:
            await subs.poll(sub.id)
        assert err.value.horizon == 15
        status = await subs.status(sub.id)
        assert status.resnapshot_required and status.horizon == 15
        assert await subs.seek(sub.id, 15) == 15
        assert [e["offset"] for e in (await subs.poll(sub.id)).events] == [16, 17, 18, 19, 20]
        assert (await subs.status(sub.id)).resnapshot_distance == 0
        # by age: everything older than max_age goes, except the newest event
        await retention.set("orders", max_age=60)
        assert await retention.apply(now=time.time() + 3600) == {"orders": 4}
        assert [e.offset for e in await topic.read(1, 100)] == [20]
        await topic.publish(order_rows(1, start=20))
        assert [e.offset for e in await topic.read(1, 100)] == [20, 21]  # offsets go on
        # a collector checkpoint (as a collector writes it) that retention overtook
        await app.store.db.write(
            lambda c: c.execute(
                sa.text(
                    'INSERT INTO rv_checkpoints (component, topic, "partition", "offset") '
                    "VALUES ('indexer', 'orders', 0, 3), ('indexer', 'orders', 1, 20)"
                )
            )
        )
        behind = await retention.collectors_behind()
        assert [(b.component, b.partition, b.checkpoint) for b in behind] == [("indexer", 0, 3)]
        assert behind[0].horizon > 3
