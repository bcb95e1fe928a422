"""The dead-letter records every layer shares: ``DeadLetter`` (one message or event a
consumer gave up on) and ``RedriveReport`` (what a redrive resolved). Pure, frozen values
with no imports from the rest of the package, so the store, the collectors and broker
adapters (which list their dead-letter queues as ``DeadLetter`` rows) all import them
from here without reaching into ``reventless.collect``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One parked event of one component, with the error that parked it."""

    id: int
    component: str
    topic: str
    offset: int
    aggregate_id: str | None
    msg_id: str
    event_type: str
    error: str
    attempts: int
    created_at_us: int


@dataclass(frozen=True, slots=True)
class RedriveReport:
    """Outcome of a redrive: dead letters resolved and aggregates still parked."""

    redriven: int
    still_parked: int


__all__ = ["DeadLetter", "RedriveReport"]
