"""Collectors: read models, event mappers (sagas) and side-effect handlers."""

from .collector import Collector
from .component import Delete, EventMapper, ReadModel, Send, SideEffectHandler, Upsert
from .deadletter import DeadLetter, RedriveReport
from .options import CollectorOptions

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
