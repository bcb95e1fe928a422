"""Secrets in URLs stay out of messages and reprs."""

from __future__ import annotations

import pytest

import reventless as rv
from reventless.urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://me:s3cret@h1:4222,h2:4222", "nats://me:***@h1:4222,h2:4222"),
        ("nats://t0ken@h1:4222", "nats://***@h1:4222"),
        ("postgresql+psycopg://app:pw@db:5432/shop", "postgresql+psycopg://app:***@db:5432/shop"),
        ("sns+sqs://AKIA:secret@eu-west-1?prefix=x", "sns+sqs://AKIA:***@eu-west-1?prefix=x"),
        ("nats://h1:4222?tls_ca=/etc/a@b.pem", "nats://h1:4222?tls_ca=/etc/a@b.pem"),
        ("nats://h1:4222?name=a@b", "nats://h1:4222?name=a@b"),
        ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_adapter_and_store_errors_do_not_show_secrets() -> None:
    from reventless_aws.options import SnsSqsOptions

    with pytest.raises(rv.BrokerError) as caught:
        SnsSqsOptions.from_url("sns+sqs://AKIA:s3cret@us-east-1?nope=1")
    assert "s3cret" not in str(caught.value) and "AKIA:***" in str(caught.value)
    assert "s3cret" not in repr(SnsSqsOptions.from_url("sns+sqs://AKIA:s3cret@us-east-1"))
    with pytest.raises(rv.BrokerError) as unknown:
        rv.App(store="sqlite://", broker="kafka://u:s3cret@h:9092")
    assert "s3cret" not in str(unknown.value)
