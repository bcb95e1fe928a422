"""reventless: event sourcing for Python with declarative aggregate specs.

Example::

    import reventless as rv

    class Created(rv.Event):
        name: str

    class Register(rv.Command):
        name: str

    class Customer(rv.Aggregate):
        events = Created
        name: str = ""

        @rv.handles(Register)
        def register(self, cmd: Register) -> Created:
            return Created(name=cmd.name)

        @rv.applies(Created)
        def _created(self, e: Created) -> None:
            self.name = e.name
"""

from .app import App, AppOptions, Forgotten
from .broker import Broker, Message
from .broker.memory import InMemoryBroker
from .codec import TopicSchema
from .collect import (
    CollectorOptions,
    DeadLetter,
    Delete,
    EventBatch,
    EventMapper,
    ReadModel,
    RedriveReport,
    Send,
    SideEffectHandler,
    Upsert,
)
from .collect.upserts import ColumnUpserts
from .dcb import DcbLog, DecideOptions, Decider, DecisionModel, DecisionResult, folds
from .errors import (
    AggregateNotFoundError,
    AppendConditionError,
    BrokerError,
    CommandIdReusedError,
    ConcurrencyError,
    KeyringError,
    LeaseLostError,
    MetadataError,
    Rejected,
    ReservedNameError,
    ReventlessError,
    SchemaMismatchError,
    SpecError,
    StoreError,
    StoreFullError,
    TenantError,
    UnhandledCommandError,
    UnknownEventTypeError,
)
from .eventlog import EventLog, ExecuteResult, LogOptions
from .handle import CollectorHandle, Projection
from .ids import uuid7
from .personal import ERASED, Erased, Personal
from .scheduler import Firing, Scheduler, SchedulerOptions
from .scheduling import CancelSchedule, Clock, ManualClock, Schedule, SystemClock
from .spec import Aggregate, Command, Envelope, Event, Metadata, applies, handles, upcasts
from .store import StoreOptions
from .tags import AppendCondition, Query, QueryItem, Tag
from .topic import Topic
from .topicdef import partition_of

__all__ = [
    "Aggregate",
    "AggregateNotFoundError",
    "App",
    "AppOptions",
    "Broker",
    "BrokerError",
    "CollectorHandle",
    "CollectorOptions",
    "Command",
    "CommandIdReusedError",
    "ConcurrencyError",
    "DeadLetter",
    "Delete",
    "Envelope",
    "Event",
    "EventBatch",
    "EventLog",
    "EventMapper",
    "ExecuteResult",
    "InMemoryBroker",
    "LeaseLostError",
    "LogOptions",
    "Message",
    "Metadata",
    "MetadataError",
    "Projection",
    "ReadModel",
    "RedriveReport",
    "Rejected",
    "ReservedNameError",
    "ReventlessError",
    "SchemaMismatchError",
    "Send",
    "SideEffectHandler",
    "SpecError",
    "StoreError",
    "StoreFullError",
    "StoreOptions",
    "TenantError",
    "Topic",
    "TopicSchema",
    "UnhandledCommandError",
    "UnknownEventTypeError",
    "Upsert",
    "applies",
    "handles",
    "partition_of",
    "upcasts",
    "uuid7",
]
__all__ += ["ColumnUpserts"]
__all__ += ["CancelSchedule", "Clock", "Firing", "ManualClock", "Schedule", "Scheduler"]
__all__ += ["SchedulerOptions", "SystemClock"]
__all__ += ["AppendCondition", "AppendConditionError", "Query", "QueryItem", "Tag"]
__all__ += ["ERASED", "Erased", "Forgotten", "KeyringError", "Personal"]
__all__ += ["DcbLog", "DecideOptions", "Decider", "DecisionModel", "DecisionResult", "folds"]


def __getattr__(name: str) -> object:
    # ``rv.spark`` imports PySpark only when it is used (the extra "spark").
    if name == "spark":
        import importlib

        return importlib.import_module(".spark", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
