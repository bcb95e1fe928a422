"""The shop demo: ``make demo`` (or ``python -m examples.shop --help``).

Registers customers, stocks SKUs, places tens of thousands of orders with bounded
concurrency, lets the saga confirm or cancel each one, then checks the read models
against what it sent and prints throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

import reventless as rv
from examples.customer.model import Register
from examples.shop.model import DEMO_STORE, AddStock, PlaceOrder, build
from reventless.store import Database


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.shop", description=__doc__)
    p.add_argument("--store", default=DEMO_STORE, help="store URL")
    p.add_argument("--broker", default="memory://", help="broker URL")
    p.add_argument("--orders", type=int, default=20_000)
    p.add_argument("--customers", type=int, default=1_000)
    p.add_argument("--skus", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=64, help="commands in flight")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep an existing SQLite file")
    p.add_argument(
        "--reset",
        action="store_true",
        help="drop reventless tables (rv_*, ev_*, rm_*) first (needed on a used server store)",
    )
    return p.parse_args(argv)


async def _run_all(
    label: str, jobs: list[tuple[rv.EventLog[Any], str, rv.Command]], concurrency: int
) -> float:
    started = time.perf_counter()
    it = iter(jobs)
    done = 0
    step = max(1, len(jobs) // 10)

    async def worker() -> None:
        nonlocal done
        for log, agg, cmd in it:
            await log.execute(agg, cmd)
            done += 1
            if done % step == 0:
                rate = done / (time.perf_counter() - started)
                print(f"  {label}: {done:>7}/{len(jobs)}  {rate:8.0f} commands/s", flush=True)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def _fresh(url: str, reset: bool) -> bool:
    """True when the store has no reventless tables (after dropping them, with ``reset``)."""
    db = Database(url)
    await db.open()
    try:

        def work(conn: Connection) -> bool:
            names = [
                n for n in sa.inspect(conn).get_table_names() if n[:3] in ("rv_", "ev_", "rm_")
            ]
            if names and reset:
                for n in names:
                    conn.exec_driver_sql(f"DROP TABLE {db.q(n)}")
                return True
            return not names

        return await db.write(work)
    finally:
        await db.close()


async def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    if a.store.startswith("sqlite:///") and not a.keep:
        path = Path(a.store.removeprefix("sqlite:///").split("?")[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    elif not await _fresh(a.store, a.reset):
        print("the store already holds reventless tables: pass --reset to drop them first")
        return 2
    rng = random.Random(a.seed)
    shop = build(a.store, a.broker)
    app = shop.app
    customers, orders, inventory = shop.customers, shop.orders, shop.inventory
    print(f"reventless shop demo: store={a.store} broker={a.broker}")
    stock = {f"sku-{i:03d}": rng.randint(50, 400) for i in range(a.skus)}
    placed: list[tuple[str, str, int, Decimal]] = []
    for n in range(a.orders):
        placed.append(
            (
                f"order-{n:06d}",
                f"sku-{rng.randrange(a.skus):03d}",
                rng.randint(1, 5),
                Decimal(rng.randint(100, 9999)) / 100,
            )
        )
    t0 = time.perf_counter()
    async with app:
        await _run_all(
            "customers",
            [
                (customers, f"cust-{i:05d}", Register(name=f"Customer {i}", address=f"{i} Main St"))
                for i in range(a.customers)
            ],
            a.concurrency,
        )
        await _run_all(
            "stock", [(inventory, sku, AddStock(qty=q)) for sku, q in stock.items()], a.concurrency
        )
        secs = await _run_all(
            "orders",
            [
                (
                    orders,
                    oid,
                    PlaceOrder(
                        customer_id=f"cust-{rng.randrange(a.customers):05d}",
                        sku=sku,
                        qty=qty,
                        unit_price=price,
                    ),
                )
                for oid, sku, qty, price in placed
            ],
            a.concurrency,
        )
        print("  waiting for the saga and read models to settle ...", flush=True)
        t_settle = time.perf_counter()
        await app.settle(timeout=600)
        settle_secs = time.perf_counter() - t_settle
        rows = await shop.summaries.all()
        levels = {r.sku: r for r in await shop.stock.all()}
        n_customers = await shop.directory.count()
        heads = await app.store.heads()
        dead = await app.dead_letters()
    total = time.perf_counter() - t0

    status: dict[str, int] = defaultdict(int)
    reserved: dict[str, int] = defaultdict(int)
    revenue = Decimal(0)
    for r in rows:
        status[r.status] += 1
        if r.status == "confirmed":
            reserved[r.sku] += r.qty
            revenue += r.total
    checks = {
        "every order has a summary": len(rows) == a.orders,
        "every order was confirmed or cancelled": status["confirmed"] + status["cancelled"]
        == a.orders,
        "stock reserved == confirmed quantities": all(
            levels[s].reserved == reserved.get(s, 0) for s in stock
        ),
        "available + reserved == stock added": all(
            levels[s].available + levels[s].reserved == q for s, q in stock.items()
        ),
        "one confirmation mail per confirmed order": len(shop.mailer.sent) == status["confirmed"],
        "customer directory complete": n_customers == a.customers,
        "no dead letters": not dead,
    }
    events = sum(heads.values())
    print(
        f"\norders: {a.orders}  confirmed: {status['confirmed']}  cancelled: {status['cancelled']}"
        f"  revenue: {revenue}"
    )
    print(f"stock levels: {len(levels)} SKUs, reserved {sum(reserved.values())} units")
    print(f"customers: {n_customers}   events in the log: {events}  ({heads})")
    print(
        f"placing orders: {a.orders / secs:,.0f} commands/s; settle after: {settle_secs:.2f}s; "
        f"end to end {events / total:,.0f} events/s over {total:.1f}s"
    )
    for name, ok in checks.items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except rv.ReventlessError as exc:  # a store or broker it cannot open: one line, exit 2
        print(f"shop demo: {str(exc).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
