"""The broker conformance suite on the in-memory broker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from reventless.broker.memory import InMemoryBroker
from reventless.testing.broker_suite import BrokerConformance


class TestInMemoryBroker(BrokerConformance):
    @pytest.fixture
    async def broker(self) -> AsyncIterator[InMemoryBroker]:
        b = InMemoryBroker()
        await b.connect()
        yield b
        await b.close()
