"""The in-App broker conformance suite on SNS -> SQS (a private moto server)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reventless.broker import Broker
from reventless.testing.app_suite import BrokerAppConformance
from tests.moto_server import MotoServer, aws_url


@pytest.mark.aws
class TestSnsSqsInApp(BrokerAppConformance):
    @pytest.fixture
    def make_broker(self, moto_server: MotoServer) -> Callable[[], str | Broker]:
        url = aws_url(moto_server)  # one prefix per test: every App of it shares the queues
        return lambda: url
