"""Personal data: what sealing and opening cost. ``python -m bench.personal [--quick]
[--rounds N] [--out BENCHMARKS.md]``

One aggregate type with a name, an e-mail and an address per event, run twice side by
side on a SQLite file (WAL, ``synchronous=FULL``, the default): once with the three
fields ``rv.Personal`` (sealed with AES-GCM under the customer's key), once as plain
``str``. Rounds alternate the two. Rows:

- *execute*: sequential commands on new customers, one event each (a key is created and
  stored per customer: the first command of a subject also writes its key row);
- *execute, known subjects*: commands on customers whose keys are cached;
- *execute_many*: new customers, 64 commands in flight (their keys are created in one
  key-store transaction, their events share appends);
- *read*: ``log.iter()`` over the whole log, decoded (keys fetched once per page);
- *catch-up*: a fresh read model collector over the whole log (rows + checkpoint).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

import reventless as rv
from bench.blocks import put_block
from reventless.store.keys import MasterKey


def _kind(kind: str) -> tuple[type[rv.Aggregate], type[rv.Command], type[rv.Event]]:
    if True:
        if kind == "personal":

            class Joined(rv.Event):
                customer_id: str
                name: Annotated[str, rv.Personal(subject="customer_id")]
                email: Annotated[str, rv.Personal(subject="customer_id")]
                address: Annotated[str, rv.Personal(subject="customer_id")]
                plan: str

        else:

            class Joined(rv.Event):  # type: ignore[no-redef]
                customer_id: str
                name: str
                email: str
                address: str
                plan: str

        class Join(rv.Command):
            name: str
            email: str
            address: str

        class Member(rv.Aggregate):
            events = Joined
            joins: int = 0

            @rv.handles(Join)
            def join(self, c: Join) -> Joined:
                return Joined(
                    customer_id=self.id, name=c.name, email=c.email, address=c.address, plan="gold"
                )

            @rv.applies(Joined)
            def _j(self, e: Joined) -> None:
                self.joins += 1

        Member.__name__ = f"Member{kind.title()}"
        return Member, Join, Joined


KINDS = {kind: _kind(kind) for kind in ("personal", "plain")}


class Row(BaseModel):
    id: str
    name: str


async def one_round(kind: str, n: int, tmp: Path) -> dict[str, float]:
    spec, join, joined = KINDS[kind]
    url = f"sqlite:///{tmp / f'{kind}.db'}"
    app = rv.App(url, options=rv.AppOptions(log=rv.LogOptions(snapshot_every=0)))
    log = app.event_log(spec)
    out: dict[str, float] = {}
    cmd = join(name="Ada Lovelace", email="ada@example.org", address="12 St James's Square")
    async with app:
        t = time.perf_counter()
        for i in range(n):
            await log.execute(f"m-{i}", cmd)
        out["execute"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(n):
            await log.execute(f"m-{i}", cmd)
        out["execute_known"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        await log.execute_many([(f"x-{i}", cmd) for i in range(n)], concurrency=64)
        out["execute_many"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        count = 0
        async for ev in log.iter():
            count += len(ev.event.name)
        out["read"] = 3 * n / (time.perf_counter() - t)
    model = rv.ReadModel(f"names_{kind}", row=Row, key="id")

    @model.on(joined)
    def _(ev: rv.Envelope[Any]) -> rv.Upsert[Row]:
        return rv.Upsert(Row(id=ev.aggregate_id, name=ev.event.name))

    app = rv.App(url)
    app.event_log(spec)
    app.collect(model)
    t = time.perf_counter()
    async with app:
        await app.settle()
        out["catchup"] = 3 * n / (time.perf_counter() - t)
        assert await app.tables[model.name].count() == 2 * n
    return out


ROWS = (
    ("execute", "execute, a new customer each (key created)", "cmd/s"),
    ("execute_known", "execute, known customers (key cached)", "cmd/s"),
    (
        "execute_many",
        "`execute_many`, new customers, 64 at once (keys share a transaction)",
        "cmd/s",
    ),
    ("read", "read the log decoded (`log.iter()`)", "events/s"),
    ("catchup", "read-model catch-up (fresh collector)", "events/s"),
)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    os.environ.setdefault("REVENTLESS_MASTER_KEY", MasterKey.generate().text)
    n = 300 if a.quick else 2000
    rounds = 1 if a.quick else a.rounds
    got: dict[str, list[dict[str, float]]] = {"personal": [], "plain": []}
    for r in range(rounds):
        order = ("personal", "plain") if r % 2 == 0 else ("plain", "personal")
        for kind in order:
            with tempfile.TemporaryDirectory() as tmp:
                got[kind].append(await one_round(kind, n, Path(tmp)))
    lines = [
        "## Personal data: sealing and opening",
        "",
        f"`python -m bench.personal --rounds {rounds}`{' --quick' if a.quick else ''}: "
        f"{n} customers, 3 personal fields per event (AES-GCM per field, one key per "
        "customer), SQLite file, WAL + `synchronous=FULL` for both; medians of "
        f"{rounds} alternating round(s). Ratio > 1 would mean sealing is faster.",
        "",
        "| workload | unit | personal | plain | personal/plain |",
        "|---|---|--:|--:|--:|",
    ]
    for key, label, unit in ROWS:
        pv = statistics.median(x[key] for x in got["personal"])
        qv = statistics.median(x[key] for x in got["plain"])
        lines.append(f"| {label} | {unit} | {pv:,.0f} | {qv:,.0f} | {pv / qv:.2f} |")
    text = "\n".join(lines)
    print(text)
    if a.out is not None:
        put_block(a.out, "personal", text)


if __name__ == "__main__":
    asyncio.run(main())
