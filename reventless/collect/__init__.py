"""Collectors: read models, event mappers (sagas) and side-effect handlers."""

from .component import Delete, EventMapper, ReadModel, Send, SideEffectHandler, Upsert
from .deadletter import DeadLetter, RedriveReport
from .options import CollectorOptions
from .runtime import Collector

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
