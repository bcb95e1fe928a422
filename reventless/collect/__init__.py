"""Collectors: read models, event mappers (sagas) and side-effect handlers."""

from .batch import EventBatch
from .collector import Collector
from .component import Delete, EventMapper, ReadModel, Send, SideEffectHandler, Upsert
from .deadletter import DeadLetter, RedriveReport
from .options import CollectorOptions

__all__ = [
    "Collector",
    "CollectorOptions",
    "DeadLetter",
    "Delete",
    "EventBatch",
    "EventMapper",
    "ReadModel",
    "RedriveReport",
    "Send",
    "SideEffectHandler",
    "Upsert",
]
