"""Placeholder: compiled column upserts (filled in by the vectorised path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..collect.component import ReadModel
from .fold import TopicPlan


def compile_upserts(
    model: ReadModel[Any], plans: Sequence[TopicPlan]
) -> Callable[[list[Any], Any], Any] | None:
    return None
