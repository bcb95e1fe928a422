"""The in-App broker conformance suite on the in-memory broker and on JetStream."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

import reventless as rv
from reventless.broker import Broker
from reventless.testing.app_suite import BrokerAppConformance


class TestInMemoryInApp(BrokerAppConformance):
    @pytest.fixture
    def make_broker(self) -> Callable[[], str | Broker]:
        shared = rv.InMemoryBroker()  # every App of a test talks through this one
        return lambda: shared


@pytest.mark.nats
class TestJetStreamInApp(BrokerAppConformance):
    @pytest.fixture
    def make_broker(self, nats_url: str) -> Callable[[], str | Broker]:
        sep = "&" if "?" in nats_url else "?"
        url = f"{nats_url}{sep}prefix=a{uuid.uuid4().hex[:8]}"
        return lambda: url
