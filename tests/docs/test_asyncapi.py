"""The AsyncAPI document of an App, validated by the real AsyncAPI parser (npm)."""

from __future__ import annotations

import asyncio
import copy
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Any

import pyarrow as pa
import pytest
from pydantic import BaseModel

import reventless as rv
from examples.dcb.courses import EVENTS as COURSE_EVENTS
from examples.dcb.courses import course_roster
from examples.shop.model import OrderPlaced, build
from reventless.docs.asyncapi import document
from reventless.errors import SpecError
from tests.docs.conftest import Validate
from tests.services import require_package


def _refs(doc: dict[str, Any], ref: str) -> Any:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _check_refs(doc: dict[str, Any]) -> int:
    """Every local $ref resolves; returns how many there are."""
    seen = 0
    stack: list[Any] = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if "$ref" in v:
                _refs(doc, v["$ref"])
                seen += 1
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return seen


def test_shop_document_is_valid(validate: Validate) -> None:
    app = build("sqlite://").app
    doc = document(app)
    [verdict] = validate(doc)
    assert verdict.valid, verdict.errors()
    assert _check_refs(doc) > 40
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] == "shop events"
    assert list(doc["servers"]) == ["memory"]
    assert set(doc["channels"]) == {"memory-Customer", "memory-Order", "memory-Inventory"}
    ops = doc["operations"]
    # the relay sends each topic; each collected component receives what it handles
    assert {k for k, o in ops.items() if o["action"] == "send"} == {
        "memory-relay-Customer",
        "memory-relay-Order",
        "memory-relay-Inventory",
    }
    receivers = {(o["x-reventless-component"], o["channel"]["$ref"]) for o in ops.values()}
    assert ("order_fulfilment", "#/channels/memory-Order") in receivers
    assert ("order_fulfilment", "#/channels/memory-Inventory") in receivers
    assert ("order_confirmations", "#/channels/memory-Order") in receivers
    assert len([o for o in ops.values() if o["action"] == "receive"]) == 6
    # the payload: rows of the topic, each event's fields the pydantic schema of its model
    schemas = doc["components"]["schemas"]
    placed = schemas["Order.OrderPlaced"]
    assert placed["properties"].keys() == OrderPlaced.model_fields.keys()
    assert placed["required"] == ["customer_id", "sku", "qty", "unit_price"]
    message = doc["components"]["messages"]["memory.Order"]
    assert message["contentType"] == "application/vnd.apache.arrow.stream"
    rows = _refs(doc, _refs(doc, message["payload"]["$ref"])["items"]["$ref"])
    titles = {v["title"] for v in rows["oneOf"]}
    assert titles == {"OrderPlaced", "OrderConfirmed", "OrderCancelled"}
    assert "rv-prev" in _refs(doc, message["headers"]["$ref"])["properties"]


class Registered(rv.Event):
    customer_id: str
    name: Annotated[str, rv.Personal(subject="customer_id")]
    born: Annotated[date | rv.Erased | None, rv.Personal(subject="customer_id")] = None
    city: str


class Moved(rv.Event):
    address: Annotated[str, rv.Personal()]


class Register(rv.Command):
    name: str
    city: str


class Person(rv.Aggregate):
    events = Registered | Moved

    @rv.handles(Register)
    def register(self, cmd: Register) -> Registered:
        return Registered(customer_id=self.id, name=cmd.name, city=cmd.city)

    @rv.applies(Registered)
    def _r(self, e: Registered) -> None:
        pass

    @rv.applies(Moved)
    def _m(self, e: Moved) -> None:
        pass


class Visit(BaseModel):
    """A model topic's row, with a personal field."""

    page: str
    visitor: Annotated[str, rv.Personal()]
    at: datetime


audit = rv.SideEffectHandler("audit.trail")


@audit.on(Moved)
def _audit(ev: rv.Envelope[Moved]) -> None:
    pass


NATS = "nats://user:hunter2@10.0.0.1:4222,10.0.0.2:4222?partitions=4&prefix=acme"
AWS = "sns+sqs://AKIDEXAMPLE:wJalrSECRET@eu-west-1?prefix=shop&endpoint=http://127.0.0.1:5000"


def _rich_app(members: int = 1) -> rv.App:
    opts = rv.AppOptions(collector=rv.CollectorOptions(members=members, member=0))
    app = rv.App(store="sqlite://", service="records", options=opts)
    app.event_log(Person, partitions=4)
    courses = app.dcb_log("courses", events=COURSE_EVENTS, partitions=2)
    assert courses is not None
    cdc = pa.schema([pa.field("op", pa.string(), False), ("ts_ms", pa.int64())])
    app.topic("cdc.rows", schema=cdc)
    app.topic("visits", model=Visit, key="page")
    app.collect(course_roster)
    app.collect(audit)
    return app


@pytest.mark.parametrize("members", [1, 2])
def test_personal_dcb_and_several_brokers(validate: Validate, members: int) -> None:
    require_package("reventless_nats", "pip install -e adapters/nats")
    require_package("reventless_aws", "pip install -e adapters/aws")
    from reventless_aws.options import SnsSqsOptions
    from reventless_nats.options import NatsOptions

    app = _rich_app(members)
    doc = document(app, brokers=[NATS, AWS, "memory://"], title="records", version="2.1.0")
    [verdict] = validate(doc)
    assert verdict.valid, verdict.errors()
    _check_refs(doc)
    text = repr(doc)
    assert "hunter2" not in text and "wJalrSECRET" not in text and "AKIDEXAMPLE" not in text
    assert [(k, s["protocol"]) for k, s in doc["servers"].items()] == [
        ("nats", "nats"),
        ("sns", "sns"),
        ("sqs", "sqs"),
        ("memory", "memory"),
    ]
    # channel addresses are the adapters' own names for these URLs
    nats, aws = NatsOptions.from_url(NATS), SnsSqsOptions.from_url(AWS)
    ch = doc["channels"]
    assert ch["nats-Person"]["address"] == nats.subject("Person", "0").replace(".0", ".{partition}")
    assert ch["nats-courses"]["address"] == "acme.courses.{partition}"
    assert ch["sns-Person"]["address"] == aws.topic_name("Person")
    assert ch["sns-cdc_rows"]["address"] == aws.topic_name("cdc.rows")
    groups = ["audit.trail"] if members == 1 else ["audit.trail.m0of2", "audit.trail.m1of2"]
    for g in groups:
        key = "sqs-" + g.replace(".", "_")
        assert ch[key]["address"] == aws.queue_name(g)
        op = doc["operations"][f"sqs-{g.replace('.', '_')}-Person"]
        assert op["action"] == "receive"
        assert op["x-reventless-component"] == "audit.trail"
        assert op["x-reventless-consumer"] == aws.queue_name(g)
        nop = doc["operations"][f"nats-{g.replace('.', '_')}-Person"]
        assert nats.durable_name(g) in nop["x-reventless-consumer"]
        assert "Moved" in nop["summary"] and "Registered" not in nop["summary"]
    if members == 2:
        parts = [doc["operations"][f"memory-{g.replace('.', '_')}-Person"] for g in groups]
        assert sorted(p for o in parts for p in o["x-reventless-partitions"]) == [0, 1, 2, 3]
    schemas = doc["components"]["schemas"]
    # personal fields are marked, with their subject
    reg = schemas["Person.Registered"]["properties"]
    assert reg["name"]["x-personal"] is True
    assert reg["name"]["x-personal-subject"] == "customer_id"
    assert reg["born"]["x-personal"] is True
    assert "x-personal" not in reg["city"]
    assert schemas["Person.Moved"]["properties"]["address"]["x-personal-subject"] == ""
    # DCB rows carry their tags; an Arrow topic's rows are its columns
    dcb = schemas["courses.Row"]["oneOf"]
    assert all("_tags" in v["allOf"][1]["properties"] for v in dcb)
    visit = schemas["visits.Visit"]["properties"]
    assert visit["at"] == {"format": "date-time", "title": "At", "type": "string"}
    assert visit["visitor"]["x-personal"] is True
    cdc = schemas["cdc.rows.Row"]["allOf"][1]
    assert cdc["properties"]["op"] == {"type": "string"} and cdc["required"] == ["op"]
    # each family's messages carry its adapter's header names
    assert "Nats-Msg-Id" in schemas["NatsHeaders"]["properties"]
    assert schemas["AwsHeaders"]["properties"]["rv-types"]["type"] == "array"


def test_the_parser_refuses_broken_documents(validate: Validate) -> None:
    """The validator can fail: documents broken in ways a generator could break them."""
    good = document(build("sqlite://").app)

    bad_ref = copy.deepcopy(good)
    bad_ref["operations"]["memory-relay-Order"]["channel"] = {"$ref": "#/channels/nope"}
    v2_action = copy.deepcopy(good)
    v2_action["operations"]["memory-relay-Order"]["action"] = "publish"
    no_host = copy.deepcopy(good)
    del no_host["servers"]["memory"]["host"]
    bad_schema = copy.deepcopy(good)
    bad_schema["components"]["schemas"]["Order.OrderPlaced"]["type"] = 7

    verdicts = validate(good, bad_ref, v2_action, no_host, bad_schema)
    assert [v.valid for v in verdicts] == [True, False, False, False, False]
    assert all(v.errors() for v in verdicts[1:])
    assert any("action" in e["path"] or "action" in e["message"] for e in verdicts[2].errors())


def test_leased_groups_and_tenant_topics(validate: Validate) -> None:
    opts = rv.AppOptions(collector=rv.CollectorOptions(group="leased"))
    app = rv.App(store="sqlite://", service="records", options=opts)
    app.event_log(Person, partitions=3, tenant="acme")
    app.collect(audit)
    doc = document(app, brokers=["memory://", AWS])
    [verdict] = validate(doc)
    assert verdict.valid, verdict.errors()
    assert "tenant acme" in doc["channels"]["memory-Person"]["description"]
    leases = [
        o
        for k, o in doc["operations"].items()
        if k.startswith("memory-") and o["action"] == "receive"
    ]
    assert sorted(p for o in leases for p in o["x-reventless-partitions"]) == [0, 1, 2]
    assert {o["x-reventless-component"] for o in leases} == {"audit.trail"}
    assert len([c for c in doc["channels"] if c.startswith("sqs-")]) == 3


def test_default_broker_url_is_the_apps_broker_scheme() -> None:
    require_package("reventless_nats", "pip install -e adapters/nats")
    require_package("reventless_aws", "pip install -e adapters/aws")
    nats = document(build("sqlite://", "nats://127.0.0.1:4222").app)
    assert [s["protocol"] for s in nats["servers"].values()] == ["nats"]
    assert nats["channels"]["nats-Order"]["address"] == "rv.Order.{partition}"
    aws = document(build("sqlite://", "sns+sqs://eu-west-1").app)
    assert [s["protocol"] for s in aws["servers"].values()] == ["sns", "sqs"]


def test_unknown_broker_scheme_is_a_spec_error() -> None:
    app = build("sqlite://").app
    with pytest.raises(SpecError, match="kafka"):
        document(app, brokers=["kafka://localhost:9092"])


async def test_documented_headers_are_the_ones_adapters_send(tmp_path: Any) -> None:
    """Headers of a real relay message (captured from the broker), and what the NATS and
    SNS/SQS adapters make of them, are all in the document's header schemas."""
    require_package("reventless_aws", "pip install -e adapters/aws")
    from reventless_aws import codec
    from reventless_nats.broker import KEY, MSG_ID

    from examples.shop.model import PlaceOrder
    from reventless.broker import Message

    shop = build(f"sqlite:///{tmp_path}/shop.db")
    doc = document(shop.app, brokers=["memory://", NATS, AWS])
    schemas = doc["components"]["schemas"]
    got: list[Message] = []
    arrived = asyncio.Event()

    async def capture(messages: Any) -> None:
        got.extend(messages)
        arrived.set()

    async with shop.app:
        await shop.app.broker.subscribe("doc-probe", ["Order"], capture)
        await shop.orders.execute(
            "o-1", PlaceOrder(customer_id="c-1", sku="s-1", qty=1, unit_price=Decimal("2.5"))
        )
        async with asyncio.timeout(10):
            await arrived.wait()
    msg = got[0]
    memory = schemas["MemoryHeaders"]
    assert set(msg.headers) <= set(memory["properties"])
    assert set(memory["required"]) <= set(msg.headers)
    nats = {**msg.headers, MSG_ID: msg.msg_id, KEY: msg.key}  # as JetStreamBroker.publish
    assert set(nats) <= set(schemas["NatsHeaders"]["properties"])
    traced = Message(msg.topic, msg.data, msg.msg_id, {**msg.headers, "traceparent": "00-x"})
    for m in (msg, traced):
        attrs = codec.attributes(m)
        assert set(attrs) <= set(schemas["AwsHeaders"]["properties"])
        assert set(schemas["AwsHeaders"]["required"]) <= set(attrs)
