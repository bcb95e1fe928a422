"""The AWS CloudFormation template of an application's channels (no aiobotocore here).

Per topic a FIFO SNS topic (logical id and name ``<Topic>EventTopic``); per collector a
FIFO SQS queue with a dead-letter queue and redrive policy, a queue policy that lets the
app's topics send to it, and one ``AWS::SNS::Subscription`` per topic it reads, with raw
message delivery and, when the collector handles only some event types of the topic, a
filter policy on the ``rv-types`` message attribute. Names match what ``SnsSqsBroker``
uses for the same URL, so the adapter runs on the deployed stack with ``create=false``.

Example::

    from reventless.topology import Topology
    template(Topology.of(app).channels(), "sns+sqs://eu-west-1?prefix=shop")
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from reventless.broker import Channels

from . import codec
from .options import SnsSqsOptions


def logical_id(name: str, taken: dict[str, str] | None = None) -> str:
    """A CloudFormation logical id (alphanumeric, CamelCase) for ``name``; when two names
    would share one (``taken``: id -> name), the later gets a crc32 suffix."""
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name) if p]
    clean = "".join(p[:1].upper() + p[1:] for p in parts) or "X"
    if taken is not None and taken.setdefault(clean, name) != name:
        clean += f"{zlib.crc32(name.encode()):08x}"
        taken[clean] = name
    return clean


def template(channels: Channels, url: str = "sns+sqs://us-east-1") -> dict[str, Any]:
    """The template (a JSON-ready dict) for ``channels`` with the names of broker ``url``."""
    o = SnsSqsOptions.from_url(url)
    broker_like_redrive = 2 * o.max_receive + 1  # as SnsSqsBroker.redrive_count
    resources: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    topic_ids: dict[str, str] = {}
    taken: dict[str, str] = {}
    for topic, (partitions, types) in channels.topics.items():
        tid = f"{logical_id(topic, taken)}EventTopic"
        topic_ids[topic] = tid
        props: dict[str, Any] = {"TopicName": o.topic_name(topic)}
        if o.fifo:
            props |= {"FifoTopic": True, "ContentBasedDeduplication": False}
        resources[tid] = {"Type": "AWS::SNS::Topic", "Properties": props}
        outputs[f"{tid}Arn"] = {
            "Description": f"reventless topic {topic} ({partitions} partitions, "
            f"{len(types)} event types)",
            "Value": {"Ref": tid},
        }
    fifo: dict[str, Any] = {"FifoQueue": True} if o.fifo else {}
    for c in channels.collectors:
        base = logical_id(c.group, taken)
        qid, dlq = f"{base}Queue", f"{base}DeadLetterQueue"
        resources[dlq] = {
            "Type": "AWS::SQS::Queue",
            "Properties": {
                "QueueName": o.dlq_name(c.group),
                **fifo,
                "MessageRetentionPeriod": o.dlq_retention,
            },
        }
        queue_props: dict[str, Any] = {
            "QueueName": o.queue_name(c.group),
            **fifo,
            "VisibilityTimeout": o.visibility,
            "MessageRetentionPeriod": o.retention,
            "ReceiveMessageWaitTimeSeconds": o.wait,
            "RedrivePolicy": {
                "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
                "maxReceiveCount": broker_like_redrive,
            },
        }
        if o.fifo:
            queue_props |= {
                "DeduplicationScope": "messageGroup",
                "FifoThroughputLimit": "perMessageGroupId",
            }
        resources[qid] = {"Type": "AWS::SQS::Queue", "Properties": queue_props}
        resources[f"{qid}Policy"] = {
            "Type": "AWS::SQS::QueuePolicy",
            "Properties": {
                "Queues": [{"Ref": qid}],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "reventless-sns",
                            "Effect": "Allow",
                            "Principal": {"Service": "sns.amazonaws.com"},
                            "Action": "sqs:SendMessage",
                            "Resource": {"Fn::GetAtt": [qid, "Arn"]},
                            "Condition": {
                                "ArnEquals": {
                                    "aws:SourceArn": [{"Ref": topic_ids[t]} for t in c.topics]
                                }
                            },
                        }
                    ],
                },
            },
        }
        for topic, handled in c.topics.items():
            sub: dict[str, Any] = {
                "TopicArn": {"Ref": topic_ids[topic]},
                "Protocol": "sqs",
                "Endpoint": {"Fn::GetAtt": [qid, "Arn"]},
                "RawMessageDelivery": True,
            }
            policy = filter_policy(handled, channels.topics[topic][1], c.partitions)
            if policy is not None:
                sub |= {"FilterPolicy": policy, "FilterPolicyScope": "MessageAttributes"}
            resources[f"{qid}{topic_ids[topic]}Subscription"] = {
                "Type": "AWS::SNS::Subscription",
                "DependsOn": [f"{qid}Policy"],
                "Properties": sub,
            }
        outputs[f"{qid}Url"] = {
            "Description": f"queue of collector {c.group}"
            + ("" if c.ordered else " (declared ordered=False)"),
            "Value": {"Ref": qid},
        }
        outputs[f"{dlq}Url"] = {"Description": f"DLQ of {c.group}", "Value": {"Ref": dlq}}
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "reventless channels: SNS topics, SQS queues with DLQs, subscriptions",
        "Resources": resources,
        "Outputs": outputs,
    }


def filter_policy(
    handled: frozenset[str] | None,
    all_types: frozenset[str],
    partitions: frozenset[int] | None = None,
) -> Any:
    """The SNS filter policy of a collector's subscription to one topic: only messages
    that carry one of the event types it handles (``rv-types``), when that is fewer than
    all, and only its ``partitions`` (``rv-key``) when it is a group member's or a lease's
    channel; the same policy ``SnsSqsBroker`` subscribes with. None: no filter."""
    narrower = handled is not None and bool(all_types) and not handled >= all_types
    return codec.filter_policy(partitions, handled if narrower else None)


def as_json(doc: dict[str, Any]) -> str:
    """The template as JSON text."""
    return json.dumps(doc, indent=2) + "\n"
