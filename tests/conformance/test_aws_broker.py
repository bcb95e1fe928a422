"""The broker conformance suite on SNS -> SQS (a private moto server), plus the
adapter's own behaviour.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from reventless.broker import Message, open_broker
from reventless.errors import BrokerError
from reventless.testing.broker_suite import BrokerConformance, msg, until
from tests.moto_server import MotoServer, aws_url, free_port, require_adapter

pytestmark = pytest.mark.aws


@pytest.fixture
async def aws_broker(sns_sqs_url: str) -> AsyncIterator[object]:
    from reventless_aws import SnsSqsBroker

    b = SnsSqsBroker.from_url(sns_sqs_url)
    await b.connect()
    yield b
    await b.close()


class TestSnsSqsBroker(BrokerConformance):
    @pytest.fixture
    async def broker(self, aws_broker: object) -> AsyncIterator[object]:
        yield aws_broker


def broker_for(url: str) -> Any:
    from reventless_aws import SnsSqsBroker

    return SnsSqsBroker.from_url(url)


def test_url_options_and_mapping() -> None:
    require_adapter()
    from reventless_aws import SnsSqsBroker, SnsSqsOptions, token

    b = open_broker("sns+sqs://k:s@eu-west-1?endpoint=http://127.0.0.1:1&prefix=shop&max_receive=3")
    assert isinstance(b, SnsSqsBroker)
    o = b.options
    assert (o.region, o.endpoint, o.prefix, o.max_receive) == (
        "eu-west-1",
        "http://127.0.0.1:1",
        "shop",
        3,
    )
    assert (o.access_key, o.secret_key) == ("k", "s")
    assert o.topic_name("Customer") == "shop-CustomerEventTopic.fifo"
    assert o.queue_name("customer_directory") == "shop-customer_directory.fifo"
    assert o.dlq_name("customer_directory") == "shop-customer_directory-dlq.fifo"
    assert o.group_id("Customer", "3") == "Customer/3"
    assert SnsSqsOptions(fifo=False).topic_name("Order") == "OrderEventTopic"
    long = o.queue_name("x" * 200)
    assert len(o.dlq_name("x" * 200)) <= 80 and long.endswith(".fifo")
    assert token("a.b") != token("a_b") and token("a.b").startswith("a_b_")
    with pytest.raises(BrokerError, match="unknown sns\\+sqs:// option"):
        SnsSqsBroker.from_url("sns+sqs://us-east-1?prefx=a")
    with pytest.raises(BrokerError, match="max_receive must be"):
        SnsSqsBroker.from_url("sns+sqs://us-east-1?max_receive=0")
    with pytest.raises(BrokerError, match="not an AWS region"):
        SnsSqsBroker.from_url("sns+sqs://nowhere")


async def test_connect_failure_is_a_broker_error() -> None:
    require_adapter()
    b = broker_for(f"sns+sqs://a:b@us-east-1?endpoint=http://127.0.0.1:{free_port()}")
    with pytest.raises(BrokerError, match="cannot reach SQS"):
        await b.connect()
    with pytest.raises(BrokerError, match="not connected"):
        await b.publish([msg("x", 1)])


async def test_an_oversized_message_is_a_clear_error_and_nothing_is_sent(
    aws_broker: Any,
) -> None:
    from reventless_aws import MAX_PAYLOAD_BYTES, MessageTooLargeError

    await aws_broker.declare("big")
    got: list[Message] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(msgs)

    await aws_broker.subscribe("g", ["big"], handle)
    fits = Message(topic="big", data=b"x" * MAX_PAYLOAD_BYTES, msg_id="big-1", key="0")
    too_big = Message(topic="big", data=b"x" * (300 * 1024), msg_id="big-2", key="0")
    with pytest.raises(MessageTooLargeError, match=r"big-2 of topic big is .* over the SNS limit"):
        await aws_broker.publish([fits, too_big])
    await aws_broker.publish([fits])  # the largest payload the relay sends still fits
    await until(lambda: len(got) == 1)
    assert got[0].data == fits.data  # never truncated


async def test_headers_key_and_id_round_trip(aws_broker: Any) -> None:
    await aws_broker.declare("hdr")
    got: list[Message] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(msgs)

    await aws_broker.subscribe("g", ["hdr"], handle)
    sent = Message(
        topic="hdr",
        data=b"\x00\x01arrow\xff",
        msg_id="hdr:0:1-3",
        headers={"rv-first": "1", "rv-last": "3", "rv-count": "3", "rv-prev": "0", "x": ""},
        key="0",
    )
    await aws_broker.publish([sent])
    await until(lambda: len(got) == 1)
    assert got[0] == sent


async def test_partial_batch_failure_dead_letters_and_redrive_in_order(
    moto_server: MotoServer,
) -> None:
    b = broker_for(aws_url(moto_server, max_receive=2))
    await b.connect()
    poison = {"a:1", "a:2"}
    calls: list[list[str]] = []
    handled: list[str] = []

    async def handle(msgs: Sequence[Message]) -> None:
        names = [m.data.decode() for m in msgs]
        calls.append(names)
        bad = [n for n in names if n in poison]
        if bad:
            raise RuntimeError(f"poison {bad[0]}")
        handled.extend(names)

    try:
        await b.declare("pb")
        await b.subscribe("g", ["pb"], handle)
        batch = [
            Message(topic="pb", data=f"{k}:{i}".encode(), msg_id=f"pb-{k}{i}", key=k)
            for i in range(4)
            for k in ("a", "b")
        ]
        await b.publish(batch)
        await until(lambda: "a:3" in handled and "b:3" in handled, timeout=20)
        # Group b never failed: each of its messages was handed over exactly once.
        assert [n for c in calls for n in c if n.startswith("b")] == [f"b:{i}" for i in range(4)]
        assert [n for n in handled if n.startswith("a")] == ["a:0", "a:3"]
        letters = await b.dead_letters("g")
        assert [(d.component, d.topic, d.msg_id) for d in letters] == [
            ("g", "pb", "pb-a1"),
            ("g", "pb", "pb-a2"),
        ]
        assert letters[0].error == "RuntimeError: poison a:1"
        assert letters[1].error == "RuntimeError: poison a:2"
        assert await b.queue_depth("g") == (0, 2)
        poison.clear()  # fixed: redrive, in order
        assert await b.redrive("g") == 2
        await until(lambda: handled.count("a:2") == 1, timeout=20)
        assert [n for n in handled if n.startswith("a")] == ["a:0", "a:3", "a:1", "a:2"]
        assert await b.dead_letters("g") == []
    finally:
        await b.close()


async def test_visibility_is_extended_while_a_handler_runs_long(moto_server: MotoServer) -> None:
    url = aws_url(moto_server, visibility=1)
    first, second = broker_for(url), broker_for(url)
    await first.connect()
    await second.connect()
    seen: list[str] = []

    async def slow(msgs: Sequence[Message]) -> None:
        seen.extend(f"first:{m.msg_id}" for m in msgs)
        await asyncio.sleep(3.0)  # three visibility timeouts

    async def fast(msgs: Sequence[Message]) -> None:
        seen.extend(f"second:{m.msg_id}" for m in msgs)

    try:
        await first.subscribe("g", ["vis"], slow)
        await first.publish([msg("vis", 1)])
        await until(lambda: len(seen) == 1)
        await second.subscribe("g", ["vis"], fast)  # another process of the same group
        calls = first.api_calls
        await asyncio.sleep(3.5)
        assert seen == ["first:vis-1"]  # never handed to the second consumer meanwhile
        assert first.api_calls - calls >= 3  # ChangeMessageVisibilityBatch kept it hidden
    finally:
        await first.close()
        await second.close()


async def test_a_closed_group_resumes_where_it_left_off(aws_broker: Any) -> None:
    got: list[bytes] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.data for m in msgs)

    sub = await aws_broker.subscribe("durable", ["res"], handle)
    await aws_broker.publish([msg("res", i) for i in range(3)])
    await until(lambda: len(got) == 3)
    await sub.close()
    await aws_broker.publish([msg("res", i) for i in range(3, 6)])  # nobody listens
    await aws_broker.subscribe("durable", ["res"], handle)
    await until(lambda: len(got) == 6)
    assert got == [f"res:{i}".encode() for i in range(6)]


async def test_group_members_get_their_partitions_through_a_filter_policy(
    aws_broker: Any,
) -> None:
    got: list[str] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.key for m in msgs)

    await aws_broker.subscribe("c.m0of2", ["parts"], handle, partitions=[0, 2])
    await aws_broker.publish([msg("parts", i, key=str(i % 4)) for i in range(8)])
    await until(lambda: len(got) == 4)
    await asyncio.sleep(0.3)
    assert sorted(got) == ["0", "0", "2", "2"]
    sns = aws_broker._sns()
    subs = await sns.list_subscriptions_by_topic(TopicArn=aws_broker.topic_arn("parts"))
    arn = subs["Subscriptions"][0]["SubscriptionArn"]
    attrs = (await sns.get_subscription_attributes(SubscriptionArn=arn))["Attributes"]
    assert attrs["RawMessageDelivery"] == "true"
    assert json.loads(attrs["FilterPolicy"]) == {"rv-key": ["0", "2"]}


async def test_create_false_needs_the_deployed_resources(moto_server: MotoServer) -> None:
    b = broker_for(aws_url(moto_server, create="false"))
    await b.connect()
    try:
        with pytest.raises(BrokerError, match=r"does not exist .* infra synth"):
            await b.declare("Nowhere")
    finally:
        await b.close()


async def test_publish_batches_many_messages(aws_broker: Any) -> None:
    await aws_broker.declare("bulk")
    got: list[bytes] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.data for m in msgs)

    await aws_broker.subscribe("g", ["bulk"], handle)
    await aws_broker.publish([msg("bulk", i, key=f"k{i % 7}") for i in range(200)])
    # PublishBatch of ten (lanes of whole message groups: a few part-filled batches)
    assert aws_broker.calls["PublishBatch"] <= 200 // 10 + 4
    await aws_broker.publish([msg("bulk", i, key=f"k{i % 7}") for i in range(50)])  # repeats
    await until(lambda: len(got) >= 200)
    await asyncio.sleep(0.5)
    assert sorted(got) == sorted(f"bulk:{i}".encode() for i in range(200))
