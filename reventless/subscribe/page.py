"""What a poll returns (``Subscriptions.poll``, ``Member.poll``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..store.subscriptions import State


@dataclass(frozen=True, slots=True)
class Page:
    """What a poll returns: events from the cursor on, the offset to poll from next, and the
    backlog (``lag`` is head - acked). A paused subscription returns no events."""

    events: list[dict[str, Any]]
    next_offset: int
    head: int
    lag: int
    state: State
    leases: dict[int, int] = field(default_factory=dict)  # group polls: partition -> epoch

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
