"""Collectors: read models, event mappers (sagas) and side-effect handlers."""

from .component import Delete, EventMapper, ReadModel, Send, SideEffectHandler, Upsert
from .deadletter import DeadLetter
from .runtime import Collector, CollectorOptions, RedriveReport

__all__ = [
    "Collector",
    "CollectorOptions",
    "DeadLetter",
    "Delete",
    "EventMapper",
    "ReadModel",
    "RedriveReport",
    "Send",
    "SideEffectHandler",
    "Upsert",
]
