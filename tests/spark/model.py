"""An aggregate whose events use every column kind that crosses the Spark boundary."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, Field

import reventless as rv


class Address(BaseModel):
    street: str
    zip: int


class Recorded(rv.Event):
    at: datetime
    day: date
    opens: time
    took: timedelta
    price: Annotated[Decimal, Field(max_digits=12, decimal_places=2)]
    note: Decimal
    tags: list[str]
    scores: dict[str, int]
    home: Address
    blob: bytes
    ok: bool
    ratio: float


class Noted(rv.Event):
    text: str
    opens: time | None = None


class Record(rv.Aggregate):
    events = Recorded | Noted
    count: int = 0

    @rv.applies(Recorded)
    def _r(self, e: Recorded) -> None:
        self.count += 1

    @rv.applies(Noted)
    def _n(self, e: Noted) -> None:
        self.count += 1
