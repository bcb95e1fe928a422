"""A small Server-Sent Events reader on httpx (the example's client side)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One received event: its type, id (the topic offset for data events) and JSON data."""

    event: str
    id: str | None
    data: str

    def json(self) -> Any:
        """The data parsed as JSON."""
        return json.loads(self.data)


async def read_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Parse the frames of an open ``text/event-stream`` response."""
    event, last_id = "message", None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield SseEvent(event, last_id, "\n".join(data))
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            last_id = value
