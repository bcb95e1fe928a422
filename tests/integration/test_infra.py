"""Infrastructure from the specs: ``reventless infra synth`` (CloudFormation, JetStream,
SQL DDL), the template checked by cfn-lint and deployed to moto through CloudFormation,
then the broker conformance suite run on the deployed resources (``create=false``).

moto gaps handled here (the template itself stays as real AWS needs it): moto's
CloudFormation ignores stand-alone ``AWS::SNS::Subscription`` and ``AWS::SQS::QueuePolicy``
resources, so after ``create_stack`` the harness applies exactly those resources of the
template through the SNS/SQS APIs (Subscribe with the template's attributes,
SetQueueAttributes with the template's policy), resolving ``Ref``/``Fn::GetAtt`` from
the stack's resources.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import reventless as rv
from reventless.cli import main as cli
from reventless.synth import Channels, CollectorChannel, channels_of, jetstream
from reventless.testing.broker_suite import BrokerConformance
from tests.model import Counter
from tests.moto_server import MotoServer, aws_url, require_adapter

pytestmark = pytest.mark.aws

SHOP = "examples.shop.model:app"


def test_synth_writes_a_template_streams_and_ddl(tmp_path: Path) -> None:
    require_adapter()
    assert cli(["infra", "synth", "--app", SHOP, "--out", str(tmp_path)]) == 0
    t = json.loads((tmp_path / "cloudformation.json").read_text())
    res = t["Resources"]
    assert res["OrderEventTopic"]["Properties"] == {
        "TopicName": "OrderEventTopic.fifo",
        "FifoTopic": True,
        "ContentBasedDeduplication": False,
    }
    q = res["StockLevelsQueue"]["Properties"]
    assert q["FifoQueue"] is True and q["QueueName"] == "stock_levels.fifo"
    assert q["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["StockLevelsDeadLetterQueue", "Arn"]
    }
    sub = res["StockLevelsQueueInventoryEventTopicSubscription"]["Properties"]
    assert sub["RawMessageDelivery"] is True
    assert sub["FilterPolicy"] == {"rv-types": ["StockAdded", "StockReleased", "StockReserved"]}
    # a collector handling every event type of a topic gets no filter
    assert "FilterPolicy" not in res["OrderSummariesQueueOrderEventTopicSubscription"]["Properties"]
    assert res["OrderFulfilmentQueuePolicy"]["Type"] == "AWS::SQS::QueuePolicy"
    js = json.loads((tmp_path / "jetstream.json").read_text())
    assert {s["name"] for s in js["streams"]} == {"RV_Customer", "RV_Order", "RV_Inventory"}
    assert {c["config"]["durable_name"] for c in js["consumers"]} >= {"order_fulfilment"}
    with sqlite3.connect(tmp_path / "x.db") as conn:  # the DDL runs on a fresh database
        conn.executescript((tmp_path / "schema.sqlite.sql").read_text())
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"rv_topics", "ev_order", "rm_stock_levels"} <= names
    assert "CREATE TABLE IF NOT EXISTS ev_order" in (tmp_path / "schema.postgresql.sql").read_text()


def cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "cfn-lint"
    return subprocess.run([str(exe), str(path)], capture_output=True, text=True, check=False)


def test_the_template_passes_cfn_lint(tmp_path: Path) -> None:
    require_adapter()
    assert (
        cli(
            [
                "infra",
                "synth",
                "--app",
                SHOP,
                "--out",
                str(tmp_path),
                "--aws-url",
                "sns+sqs://eu-west-1?prefix=shop&max_receive=4",
            ]
        )
        == 0
    )
    done = cfn_lint(tmp_path / "cloudformation.json")
    assert done.returncode == 0, done.stdout + done.stderr


# -- deployed through CloudFormation on moto ---------------------------------------------

#: The channels the broker conformance suite uses.
SUITE = Channels(
    topics={f"t{i}": (1, frozenset()) for i in range(1, 7)},
    collectors=[
        CollectorChannel("a", {"t1": None}),
        CollectorChannel("b", {"t1": None}),
        CollectorChannel("g", {"t2": None, "t3": None, "t5": None}),
        CollectorChannel("group", {"t4": None}),
    ],
)


def deploy(server: MotoServer, template: dict[str, Any], name: str) -> None:
    """create_stack on moto, then apply what moto's CloudFormation skips."""
    import boto3

    kw = {
        "endpoint_url": server.endpoint,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    cfn, sns, sqs = (boto3.client(s, **kw) for s in ("cloudformation", "sns", "sqs"))  # type: ignore[call-overload]
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))
    status = cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
    assert status == "CREATE_COMPLETE", status
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.describe_stack_resources(StackName=name)["StackResources"]
        if "LogicalResourceId" in r  # moto lists the resources it skipped without ids
    }

    def resolve(v: Any) -> Any:
        if isinstance(v, dict) and "Ref" in v:
            return physical[v["Ref"]]
        if isinstance(v, dict) and "Fn::GetAtt" in v:
            logical, attr = v["Fn::GetAtt"]
            assert attr == "Arn"
            url = physical[logical]
            return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
        if isinstance(v, dict):
            return {k: resolve(x) for k, x in v.items()}
        if isinstance(v, list):
            return [resolve(x) for x in v]
        return v

    for logical, r in template["Resources"].items():
        p = r["Properties"]
        if r["Type"] == "AWS::SQS::QueuePolicy":  # moto gap: applied by the API
            for url in resolve(p["Queues"]):
                doc = json.dumps(resolve(p["PolicyDocument"]))
                sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": doc})
        elif r["Type"] == "AWS::SNS::Subscription":  # moto gap: applied by the API
            attrs = {"RawMessageDelivery": str(p["RawMessageDelivery"]).lower()}
            if "FilterPolicy" in p:
                attrs["FilterPolicy"] = json.dumps(p["FilterPolicy"])
                attrs["FilterPolicyScope"] = p["FilterPolicyScope"]
            sns.subscribe(
                TopicArn=resolve(p["TopicArn"]),
                Protocol=p["Protocol"],
                Endpoint=resolve(p["Endpoint"]),
                Attributes=attrs,
            )
        elif r["Type"] == "AWS::SQS::Queue" and "RedrivePolicy" in p:
            # What moto did deploy is checked, not patched: the redrive policy is there.
            got = sqs.get_queue_attributes(QueueUrl=physical[logical], AttributeNames=["All"])
            redrive = json.loads(got["Attributes"]["RedrivePolicy"])
            assert int(redrive["maxReceiveCount"]) == p["RedrivePolicy"]["maxReceiveCount"]


class TestDeployedStack(BrokerConformance):
    """The broker suite on topics and queues made by CloudFormation, not by the adapter."""

    @pytest.fixture
    async def broker(self, moto_server: MotoServer) -> AsyncIterator[object]:
        from reventless_aws import SnsSqsBroker
        from reventless_aws.cloudformation import template

        prefix = f"s{uuid.uuid4().hex[:8]}"
        url = aws_url(moto_server, prefix=prefix, create="false")
        deploy(moto_server, template(SUITE, url), f"rv-{prefix}")
        b = SnsSqsBroker.from_url(url)
        await b.connect()
        yield b
        assert b.calls["CreateQueue"] == b.calls["CreateTopic"] == b.calls["Subscribe"] == 0
        await b.close()


def test_channels_of_an_app_name_topics_collectors_and_filters() -> None:
    from examples.shop.model import app

    ch = channels_of(app())
    assert set(ch.topics) == {"Customer", "Order", "Inventory"}
    stock = next(c for c in ch.collectors if c.group == "stock_levels")
    assert stock.topics == {
        "Inventory": frozenset({"StockAdded", "StockReserved", "StockReleased"})
    }
    assert all(c.ordered for c in ch.collectors)


@pytest.fixture(autouse=True)
def _no_demo_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)  # the shop app's default store path stays in tmp
    yield


def test_group_members_and_leases_get_channels_of_their_partitions() -> None:
    from tests.integration.group_members import leased_app, member_app

    kw = {"ttl": 5.0, "heartbeat": 0.1, "poll": 60.0}
    leased = channels_of(leased_app("sqlite://", "memory://", "a", 0, **kw))
    assert [(c.group, c.partitions) for c in leased.collectors] == [
        (f"ordered.lease.Counter.{p}", frozenset({p})) for p in range(4)
    ]
    static = channels_of(member_app("sqlite://", "memory://", 1, 2, poll=60.0))
    assert [(c.group, c.partitions) for c in static.collectors] == [
        ("ordered.m0of2", frozenset({0, 2})),
        ("ordered.m1of2", frozenset({1, 3})),
    ]
    from reventless_nats import NatsOptions

    url = "nats://127.0.0.1:4222?partitions=2"
    consumers = [c["config"] for c in jetstream(leased, url)["consumers"]]
    o = NatsOptions.from_url(url)  # as the broker names a leased partition's consumer
    assert {c["name"]: c["filter_subject"] for c in consumers} == {
        o.durable_name(f"ordered.lease.Counter.{p}", p % 2): f"rv.Counter.{p % 2}" for p in range(4)
    }


async def test_leased_members_run_on_a_deployed_stack(
    tmp_path: Path, moto_server: MotoServer
) -> None:
    """Synthesised for a leased group, deployed by CloudFormation, then run with
    ``create=false``: each partition's queue is in the template, with its key filter."""
    from reventless_aws.cloudformation import template

    from tests.integration.group_members import leased_app
    from tests.integration.test_groups import write_commands
    from tests.integration.test_leased_groups import PARTS, landed_exactly_once, until_split

    prefix = f"l{uuid.uuid4().hex[:8]}"
    url = aws_url(moto_server, prefix=prefix, create="false")
    store = f"sqlite:///{tmp_path / 'group.db'}"
    kw = {"ttl": 5.0, "heartbeat": 0.1, "poll": 60.0}
    a, b = (leased_app(store, url, w, i, **kw) for i, w in enumerate("ab"))
    deploy(moto_server, template(channels_of(a), url), f"rv-{prefix}")
    writer = rv.App(store=store, broker=url, options=rv.AppOptions(partitions=PARTS))
    log = writer.event_log(Counter)
    async with writer, a, b:
        await until_split([2, 2], a, b)
        await landed_exactly_once(writer, (a, b), await write_commands(log, 16, 3), 30.0)
        for app in (writer, a, b):
            calls = app.broker.calls  # type: ignore[attr-defined]
            assert calls["CreateQueue"] == calls["CreateTopic"] == calls["Subscribe"] == 0
