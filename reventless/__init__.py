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

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING

# The public names are imported on first use (PEP 562, ``__getattr__`` below), so that a
# process that needs little of the package (``reventless --help``, a shell completion, a
# usage error) does not import SQLAlchemy, pyarrow and pydantic. Type checkers read them
# here; ``_HOMES`` says where each lives (tests/unit/test_package.py keeps the two equal).
if TYPE_CHECKING:
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


#: Each public name's module (relative to the package).
_HOMES: dict[str, str] = {
    "App": ".app",
    "AppOptions": ".app",
    "Forgotten": ".app",
    "Broker": ".broker",
    "Message": ".broker",
    "InMemoryBroker": ".broker.memory",
    "TopicSchema": ".codec",
    "CollectorOptions": ".collect",
    "DeadLetter": ".collect",
    "Delete": ".collect",
    "EventBatch": ".collect",
    "EventMapper": ".collect",
    "ReadModel": ".collect",
    "RedriveReport": ".collect",
    "Send": ".collect",
    "SideEffectHandler": ".collect",
    "Upsert": ".collect",
    "ColumnUpserts": ".collect.upserts",
    "DcbLog": ".dcb",
    "DecideOptions": ".dcb",
    "Decider": ".dcb",
    "DecisionModel": ".dcb",
    "DecisionResult": ".dcb",
    "folds": ".dcb",
    "AggregateNotFoundError": ".errors",
    "AppendConditionError": ".errors",
    "BrokerError": ".errors",
    "CommandIdReusedError": ".errors",
    "ConcurrencyError": ".errors",
    "KeyringError": ".errors",
    "LeaseLostError": ".errors",
    "MetadataError": ".errors",
    "Rejected": ".errors",
    "ReservedNameError": ".errors",
    "ReventlessError": ".errors",
    "SchemaMismatchError": ".errors",
    "SpecError": ".errors",
    "StoreError": ".errors",
    "StoreFullError": ".errors",
    "TenantError": ".errors",
    "UnhandledCommandError": ".errors",
    "UnknownEventTypeError": ".errors",
    "EventLog": ".eventlog",
    "ExecuteResult": ".eventlog",
    "LogOptions": ".eventlog",
    "CollectorHandle": ".handle",
    "Projection": ".handle",
    "uuid7": ".ids",
    "ERASED": ".personal",
    "Erased": ".personal",
    "Personal": ".personal",
    "Firing": ".scheduler",
    "Scheduler": ".scheduler",
    "SchedulerOptions": ".scheduler",
    "CancelSchedule": ".scheduling",
    "Clock": ".scheduling",
    "ManualClock": ".scheduling",
    "Schedule": ".scheduling",
    "SystemClock": ".scheduling",
    "Aggregate": ".spec",
    "Command": ".spec",
    "Envelope": ".spec",
    "Event": ".spec",
    "Metadata": ".spec",
    "applies": ".spec",
    "handles": ".spec",
    "upcasts": ".spec",
    "StoreOptions": ".store",
    "AppendCondition": ".tags",
    "Query": ".tags",
    "QueryItem": ".tags",
    "Tag": ".tags",
    "Topic": ".topic",
    "partition_of": ".topicdef",
}


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept; a submodule
    (``rv.telemetry``, ``rv.tags``, ``rv.spark``: PySpark only when it is used)."""
    home = _HOMES.get(name)
    if home is not None:
        value: object = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value
        return value
    if (
        name.isidentifier()
        and not name.startswith("_")
        and importlib.util.find_spec(f"{__name__}.{name}") is not None
    ):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
