"""reventless-aws: the SNS/SQS broker adapter (``sns+sqs://region?...`` URLs) and the
CloudFormation synthesis of an App's topics and collectors.

Example::

    import reventless as rv

    app = rv.App(store="sqlite:///shop.db", broker="sns+sqs://us-east-1?prefix=shop")
"""

from __future__ import annotations

from .broker import SnsSqsBroker, SnsSqsSubscription
from .codec import MessageTooLargeError
from .options import MAX_PAYLOAD_BYTES, SnsSqsOptions, token

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "MessageTooLargeError",
    "SnsSqsBroker",
    "SnsSqsOptions",
    "SnsSqsSubscription",
    "token",
]
