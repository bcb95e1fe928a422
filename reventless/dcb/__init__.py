"""Dynamic consistency boundaries: DCB logs (read by query, append under a condition).

Example::

    courses = app.dcb_log("courses", events=CourseDefined | StudentSubscribed)
"""

from __future__ import annotations

from .decider import Decider
from .decision import DecisionModel, folds
from .execute import DecideOptions, DecisionResult
from .log import DcbLog

__all__ = ["DcbLog", "DecideOptions", "Decider", "DecisionModel", "DecisionResult", "folds"]
