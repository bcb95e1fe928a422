"""What a poll returns (``Subscriptions.poll``, ``Member.poll``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from ..store.subscriptions import State
from .encode import EncodedEvents


@dataclass(frozen=True, slots=True)
class Page:
    """What a poll returns: events from the cursor on, the offset to poll from next, and the
    backlog (``lag`` is head - acked). A paused subscription returns no events.

    The events are held as JSON (``encoded``: what the SSE stream sends as is); ``events``
    gives them as dicts.

    Example::

        page = await subs.poll(sub.id, limit=100)
        for ev in page.events:
            print(ev["offset"], ev["data"])
    """

    items: InitVar[EncodedEvents | Sequence[Mapping[str, Any]]]
    next_offset: int
    head: int
    lag: int
    state: State
    leases: dict[int, int] = field(default_factory=dict)  # group polls: partition -> epoch
    #: The events' offsets and JSON texts.
    encoded: EncodedEvents = field(init=False)

    def __post_init__(self, items: EncodedEvents | Sequence[Mapping[str, Any]]) -> None:
        encoded = items if isinstance(items, EncodedEvents) else EncodedEvents.of_dicts(items)
        object.__setattr__(self, "encoded", encoded)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events as dicts ``{"offset", "type", "key", ..., "data": {...}}``."""
        return self.encoded.dicts()

    def as_json(self) -> dict[str, Any]:
        """The JSON body the gateway returns."""
        out: dict[str, Any] = {
            "events": self.events,
            "next_offset": self.next_offset,
            "head": self.head,
            "lag": self.lag,
            "state": self.state,
        }
        if self.leases:
            out["leases"] = {str(p): e for p, e in self.leases.items()}
        return out
