"""The SNS/SQS adapter inside an App, on a private moto server: relay pages split to fit
SNS's 256 KiB, unordered channels only for collectors that declare they do not need
order, and broker dead letters in the framework's listing (App and CLI).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from pydantic import BaseModel

import reventless as rv
from reventless.cli import main as cli
from reventless.testing.app_suite import Add, Tally, ordered
from reventless.testing.broker_suite import until
from tests.moto_server import MotoServer, aws_url

pytestmark = pytest.mark.aws


class Noted(rv.Event):
    text: str


class Note(rv.Command):
    text: str


class Notebook(rv.Aggregate):
    events = Noted
    size: int = 0

    @rv.handles(Note)
    def note(self, cmd: Note) -> Noted:
        return Noted(text=cmd.text)

    @rv.applies(Noted)
    def _noted(self, e: Noted) -> None:
        self.size += len(e.text)


class Page(BaseModel):
    id: str
    pages: int
    chars: int


def pages() -> rv.ReadModel[Page]:
    model = rv.ReadModel("pages", row=Page, key="id")

    @model.on(Noted)
    def _page(ev: rv.Envelope[Noted], current: Page | None) -> rv.Upsert[Page]:
        assert ev.aggregate_id is not None
        n = current.pages if current else 0
        assert ev.version == n + 1, "out of order"
        chars = (current.chars if current else 0) + len(ev.event.text)
        return rv.Upsert(Page(id=ev.aggregate_id, pages=n + 1, chars=chars))

    return model


def options(poll: float = 60.0) -> rv.AppOptions:
    return rv.AppOptions(collector=rv.CollectorOptions(poll_interval=poll, grace=poll))


async def test_large_pages_are_split_to_fit_and_one_huge_event_comes_from_the_store(
    tmp_path: Path, moto_server: MotoServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = rv.App(f"sqlite:///{tmp_path / 's.db'}", aws_url(moto_server), options=options(0.5))
    view = app.collect(pages())
    log = app.event_log(Notebook)
    async with app:
        broker = app.broker
        # 40 events of 20 KB in one transaction: one relay page of ~800 KB.
        await log.execute_many([("nb", Note(text=f"{i:04d}" + "x" * 20_000)) for i in range(40)])
        await app.settle(timeout=60)
        assert await view.get("nb") == Page(id="nb", pages=40, chars=40 * 20_004)
        assert broker.calls["PublishBatch"] >= 1
        assert broker.published >= 4  # split into messages under the limit
        with caplog.at_level(logging.ERROR, logger="reventless.relay"):
            await log.execute("nb", Note(text="y" * 300_000))  # one event over the limit
            await log.execute("nb", Note(text="after"))
            await app.settle(timeout=60)
        assert "over the broker's message limit" in caplog.text
        assert await view.get("nb") == Page(id="nb", pages=42, chars=40 * 20_004 + 300_005)


async def test_an_unordered_channel_needs_collectors_declared_unordered(
    tmp_path: Path, moto_server: MotoServer
) -> None:
    url = aws_url(moto_server, fifo="false")
    strict = rv.App(f"sqlite:///{tmp_path / 'a.db'}", url, options=options())
    strict.event_log(Tally)
    strict.collect(ordered())
    with pytest.raises(rv.SpecError, match="seen needs per-aggregate order"):
        await strict.start()
    assert not (tmp_path / "a.db").exists()  # refused before anything was built

    seen: list[int] = []
    audit = rv.SideEffectHandler("audit", ordered=False)

    @audit.on(rv.testing.app_suite.Inc)
    async def _audit(ev: rv.Envelope[rv.testing.app_suite.Inc]) -> None:
        seen.append(ev.offset)

    app = rv.App(f"sqlite:///{tmp_path / 'b.db'}", url, options=options())
    app.event_log(Tally)
    app.collect(audit)
    async with app:
        await app.log_for(Tally).execute_many([(f"u-{i % 3}", Add()) for i in range(30)])
        await app.settle(timeout=30)
    assert sorted(seen) == list(range(1, 31))


async def test_a_message_the_collector_cannot_read_is_a_listed_dead_letter(
    tmp_path: Path, moto_server: MotoServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    url = aws_url(moto_server, max_receive=2)
    app = rv.App(store, url, options=rv.AppOptions(partitions=4, **_collector()))
    app.event_log(Tally)
    app.collect(ordered())
    async with app:
        await app.log_for(Tally).execute("fine", Add())
        await app.settle(timeout=30)
        corrupt = rv.Message(
            topic="Tally",
            data=b"not arrow",
            msg_id="Tally:1:99-99",
            headers={"rv-first": "99", "rv-last": "99", "rv-prev": "0"},
            key="1",
        )
        await app.broker.publish([corrupt])

        async def listed() -> list[rv.DeadLetter]:
            return [d for d in await app.dead_letters() if d.msg_id == corrupt.msg_id]

        for _ in range(200):
            if await listed():
                break
            await asyncio.sleep(0.1)
        (letter,) = await listed()
        assert (letter.component, letter.topic, letter.offset) == ("seen", "Tally", 99)
        assert "ArrowInvalid" in letter.error
        assert await app.dead_letters("seen") == [letter]
    assert await asyncio.to_thread(cli, ["dead-letters", "--store", store, "--broker", url]) == 0
    out = capsys.readouterr().out
    assert "seen" in out and "ArrowInvalid" in out and "sqs message (offsets 99-99" in out


def _collector() -> dict[str, rv.CollectorOptions]:
    return {"collector": rv.CollectorOptions(poll_interval=60.0, grace=60.0)}


async def test_the_broker_counts_its_api_calls(tmp_path: Path, moto_server: MotoServer) -> None:
    app = rv.App(f"sqlite:///{tmp_path / 's.db'}", aws_url(moto_server), options=options())
    app.event_log(Tally)
    view = app.collect(ordered())
    async with app:
        await until(lambda: app.broker.api_calls > 0)
        before = dict(app.broker.calls)
        # 50 aggregates: 50 commands in flight, so group commits hold many events whatever
        # the machine's load (with 5, each commit held at most 5 and a loaded machine's
        # relay flushed after nearly every one).
        await app.log_for(Tally).execute_many([(f"c-{i % 50}", Add()) for i in range(500)])
        await app.settle(timeout=30)
        spent = {k: v - before.get(k, 0) for k, v in app.broker.calls.items()}
        assert sum(r.events for r in await view.all()) == 500
    # The relay sends what each group commit landed as one message (per partition) and
    # PublishBatch takes ten: far fewer calls than events.
    assert spent["PublishBatch"] <= 500 * 0.1
    assert spent.get("Publish", 0) == spent.get("SendMessage", 0) == 0


class Opened(rv.Event):
    n: int


class Closed(rv.Event):
    n: int


class Toggle(rv.Command):
    n: int


class Door(rv.Aggregate):
    events = Opened | Closed
    open: bool = False

    @rv.handles(Toggle)
    def toggle(self, cmd: Toggle) -> Opened | Closed:
        return Closed(n=cmd.n) if self.open else Opened(n=cmd.n)

    @rv.applies(Opened)
    def _opened(self, e: Opened) -> None:
        self.open = True

    @rv.applies(Closed)
    def _closed(self, e: Closed) -> None:
        self.open = False


async def test_sns_drops_what_a_collector_does_not_handle(
    tmp_path: Path, moto_server: MotoServer
) -> None:
    seen: list[int] = []
    closes = rv.SideEffectHandler("closes", where="n >= 10")

    @closes.on(Closed)
    def _close(ev: rv.Envelope[Closed]) -> None:
        seen.append(ev.event.n)

    app = rv.App(f"sqlite:///{tmp_path / 'd.db'}", aws_url(moto_server), options=options())
    log = app.event_log(Door)
    app.collect(closes)
    async with app:
        broker = app.broker
        sns = broker._sns()  # type: ignore[attr-defined]
        subs = await sns.list_subscriptions_by_topic(TopicArn=broker.topic_arn("Door"))  # type: ignore[attr-defined]
        arns = [s["SubscriptionArn"] for s in subs["Subscriptions"]]
        assert len(arns) == 1
        attrs = (await sns.get_subscription_attributes(SubscriptionArn=arns[0]))["Attributes"]
        # The handler's one type (the predicate does not constrain the type further).
        assert json.loads(attrs["FilterPolicy"]) == {"rv-types": ["Closed"]}
        for i in range(20):
            await log.execute("d-1", Toggle(n=i))
        await app.settle(timeout=30)
    assert seen == [11, 13, 15, 17, 19]  # every Closed with n >= 10, once, in order
