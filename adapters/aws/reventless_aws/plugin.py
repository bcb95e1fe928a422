"""The ``sns+sqs://`` broker plugin (entry point in the ``reventless.brokers`` group of this
distribution's ``pyproject.toml``): the factory of ``SnsSqsBroker`` and the CloudFormation
template ``reventless infra synth`` writes.

Example::

    broker = PLUGIN.factory("sns+sqs://eu-west-1?prefix=shop")
"""

from __future__ import annotations

from reventless.broker import BrokerPlugin, Synthesis

from .broker import SnsSqsBroker
from .cloudformation import template

PLUGIN = BrokerPlugin(
    schemes=("sns+sqs",),
    factory=SnsSqsBroker.from_url,
    install_hint="pip install reventless-aws",
    synth=Synthesis("cloudformation.json", template),
)

__all__ = ["PLUGIN"]
