"""The broker conformance suite on NATS JetStream, plus the adapter's own behaviour.

Needs nats-server (a private one is started per session: see tests/nats_server.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

import pytest

from reventless.broker import Message, open_broker
from reventless.errors import BrokerError
from reventless.testing.broker_suite import BrokerConformance, msg, until
from tests.nats_server import free_port, require_adapter

pytestmark = pytest.mark.nats


@pytest.fixture
async def nats_broker(nats_url: str) -> AsyncIterator[object]:
    from reventless_nats import JetStreamBroker

    b = JetStreamBroker.from_url(nats_url)
    await b.connect()
    yield b
    await b.close()


class TestJetStreamBroker(BrokerConformance):
    @pytest.fixture
    async def broker(self, nats_broker: object) -> AsyncIterator[object]:
        yield nats_broker


def test_url_options_and_mapping() -> None:
    require_adapter()
    from reventless_nats import JetStreamBroker, NatsOptions, token

    b = open_broker("nats://h1:4222,h2:4223?partitions=4&max_deliver=3&prefix=app1")
    assert isinstance(b, JetStreamBroker)
    o = b.options
    assert o.servers == ("nats://h1:4222", "nats://h2:4223")
    assert (o.partitions, o.max_deliver) == (4, 3)
    assert b.stream_name("Customer") == "APP1_Customer"
    assert b.subject("Customer", "c-1") == f"app1.Customer.{o.partition('c-1')}"
    assert 0 <= o.partition("c-1") < 4
    assert NatsOptions().stream_name("Order") == "RV_Order"
    assert NatsOptions().subjects("Order") == "rv.Order.>"
    # Unsafe names become one token; distinct names stay distinct.
    assert token("a.b") != token("a_b") and token("a.b").startswith("a_b_")
    assert token("shop orders*").replace("_", "").isalnum()
    with pytest.raises(BrokerError, match="unknown nats:// option"):
        JetStreamBroker.from_url("nats://127.0.0.1:4222?partitons=4")
    with pytest.raises(BrokerError, match="partitions must be >= 1"):
        JetStreamBroker.from_url("nats://127.0.0.1:4222?partitions=0")
    # Credentials leave the server list; TLS comes from the scheme or a tls_* option.
    sec = NatsOptions.from_url("nats+tls://me:p%40ss@h1:4222,h2:4222?tls_ca=/ca.pem")
    assert sec.servers == ("tls://h1:4222", "tls://h2:4222")
    assert (sec.user, sec.password, sec.tls, sec.tls_ca) == ("me", "p@ss", True, "/ca.pem")
    assert "p@ss" not in repr(sec) and "p%40ss" not in repr(sec)
    tok = NatsOptions.from_url("nats://tok3n@h1:4222?creds=/app.creds")
    assert (tok.token, tok.user, tok.tls, tok.creds) == ("tok3n", "", False, "/app.creds")
    assert tok.connect_options() == {"token": "tok3n", "user_credentials": "/app.creds"}
    assert NatsOptions.from_url("nats://h1:4222?tls_hostname=nats.internal").tls
    with pytest.raises(BrokerError, match=r"me:\*\*\*@h1") as caught:
        JetStreamBroker.from_url("nats://me:p%40ss@h1:4222?partitons=4")
    assert "p%40ss" not in str(caught.value)
    with pytest.raises(BrokerError, match="tls_key needs tls_cert"):
        NatsOptions.from_url("nats://h1:4222?tls_key=/k.pem")


async def test_connect_failure_is_a_broker_error() -> None:
    require_adapter()
    from reventless_nats import JetStreamBroker

    b = JetStreamBroker.from_url(
        f"nats://127.0.0.1:{free_port()}?connect_retries=0&connect_timeout=0.5"
    )
    with pytest.raises(BrokerError, match="cannot connect"):
        await b.connect()
    with pytest.raises(BrokerError, match="not connected"):
        await b.publish([msg("x", 1)])


async def test_declare_is_idempotent_and_fixes_an_existing_stream(nats_broker: object) -> None:
    import nats
    from nats.js.api import StorageType, StreamConfig
    from reventless_nats import JetStreamBroker

    assert isinstance(nats_broker, JetStreamBroker)
    b = nats_broker
    await b.declare("orders")
    await b.declare("orders")
    fresh = JetStreamBroker(b.options)  # another process declaring the same topic
    await fresh.connect()
    try:
        await fresh.declare("orders")
        info = await fresh.stream_info("orders")
        assert info.config.subjects == [b.options.subjects("orders")]
        assert info.config.duplicate_window == 120
        assert info.config.storage in ("file", StorageType.FILE)

        # A stream of that name made by someone else, with other subjects: ours get added.
        name = b.stream_name("legacy")
        nc = await nats.connect(b.options.servers[0])
        await nc.jetstream().add_stream(StreamConfig(name=name, subjects=[f"{name}.other"]))
        await nc.close()
        await fresh.declare("legacy")
        info = await fresh.stream_info("legacy")
        assert info.config.subjects == [f"{name}.other", b.options.subjects("legacy")]
        await fresh.publish([msg("legacy", 1)])
        assert (await fresh.stream_info("legacy")).state.messages == 1
    finally:
        await fresh.close()


async def test_headers_key_and_id_round_trip(nats_broker: object) -> None:
    from reventless_nats import JetStreamBroker

    assert isinstance(nats_broker, JetStreamBroker)
    await nats_broker.declare("hdr")
    got: list[Message] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(msgs)

    await nats_broker.subscribe("g", ["hdr"], handle)
    sent = Message(
        topic="hdr",
        data=b"\x00\x01arrow",
        msg_id="hdr:1-3",
        headers={"rv-first": "1", "rv-last": "3", "rv-count": "3"},
        key="Counter",
    )
    await nats_broker.publish([sent])
    await until(lambda: len(got) == 1)
    assert got[0] == sent


async def test_gives_up_after_max_deliver_with_term(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from reventless_nats import JetStreamBroker

    b = JetStreamBroker.from_url(nats_url + "&max_deliver=3")
    await b.connect()
    try:
        await b.declare("poison")
        attempts: list[bytes] = []

        async def handle(msgs: Sequence[Message]) -> None:
            attempts.extend(m.data for m in msgs)
            if any(m.data == b"poison:1" for m in msgs):
                raise RuntimeError("always fails")

        with caplog.at_level(logging.ERROR, logger="reventless.broker.nats"):
            await b.subscribe("g", ["poison"], handle)
            await b.publish([msg("poison", 1)])
            await until(lambda: len(attempts) >= 3)
            await b.publish([msg("poison", 2)])
            await until(lambda: b"poison:2" in attempts)
            await asyncio.sleep(0.5)
        assert attempts.count(b"poison:1") == 3  # max_deliver, then term: no more
        assert "gave up on 1 message(s) after 3 deliveries" in caplog.text
    finally:
        await b.close()


async def test_a_closed_group_resumes_where_it_left_off(nats_url: str) -> None:
    from reventless_nats import JetStreamBroker

    b = JetStreamBroker.from_url(nats_url)
    await b.connect()
    got: list[bytes] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.data for m in msgs)

    try:
        sub = await b.subscribe("durable", ["res"], handle)
        await b.publish([msg("res", i) for i in range(3)])
        await until(lambda: len(got) == 3)
        await sub.close()
        await b.publish([msg("res", i) for i in range(3, 6)])  # while nobody listens
        await b.subscribe("durable", ["res"], handle)
        await until(lambda: len(got) == 6)
        assert got == [f"res:{i}".encode() for i in range(6)]
    finally:
        await b.close()


async def test_publish_pipelines_many_messages(nats_broker: object) -> None:
    from reventless_nats import JetStreamBroker

    assert isinstance(nats_broker, JetStreamBroker)
    await nats_broker.declare("bulk")
    batch = [msg("bulk", i, key=f"k{i % 7}") for i in range(2000)]
    await nats_broker.publish(batch)
    await nats_broker.publish(batch[:500])  # re-sent: deduplicated by Nats-Msg-Id
    info = await nats_broker.stream_info("bulk")
    assert info.state.messages == 2000
    assert nats_broker.duplicates_dropped == 500


async def test_a_group_member_gets_only_its_subjects_from_the_server(nats_url: str) -> None:
    import nats
    from reventless_nats import JetStreamBroker

    b = JetStreamBroker.from_url(f"{nats_url}&partitions=4")
    await b.connect()
    got: list[str] = []

    async def handle(msgs: Sequence[Message]) -> None:
        got.extend(m.key for m in msgs)

    try:
        await b.declare("parts")
        # Topic partitions 1 and 5 both map to subject partition 1 (of 4).
        await b.subscribe("grp.m1of2", ["parts"], handle, partitions=[1, 5])
        await b.subscribe("whole", ["parts"], handle, partitions=[0, 1, 2, 3])
        keys = [str(i % 8) for i in range(40)]
        await b.publish(
            [Message(topic="parts", data=b"x", msg_id=f"p-{i}", key=k) for i, k in enumerate(keys)]
        )
        mine = [k for k in keys if k in ("1", "5")]
        await until(lambda: sorted(got) == sorted(mine + [k for k in keys if int(k) < 4]))
        o = b.options
        nc = await nats.connect(o.servers[0])
        js = nc.jetstream()
        member = await js.consumer_info(o.stream_name("parts"), o.durable_name("grp.m1of2", 1))
        assert member.config.filter_subject == o.subjects("parts", 1)
        # The server sent the member subject 1 only: keys 1 and 5, nothing else.
        assert member.delivered.consumer_seq == len(mine)
        whole = await js.consumer_info(o.stream_name("parts"), o.durable_name("whole"))
        assert whole.config.filter_subject == o.subjects("parts")  # all 4 subjects: one consumer
        await nc.close()
    finally:
        await b.close()
