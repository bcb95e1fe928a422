"""Collectors: read models, event mappers (sagas) and side-effect handlers."""

from .component import Delete, EventMapper, ReadModel, Send, SideEffectHandler, Upsert
from .deadletter import DeadLetter, RedriveReport
from .runtime import Collector, CollectorOptions

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
