"""A search-index style consumer that follows a topic over the gateway's SSE stream.

``SearchIndex`` is an inverted index (word -> product keys) kept current from
``ProductListed`` / ``ProductDelisted`` rows of the ``products`` topic. ``follow`` reads
the subscription's stream, applies each event, acks every ``ack_every`` events (so a
restarted indexer resumes at its ack) and reconnects with ``Last-Event-ID`` after a
dropped connection.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict

import httpx
import pyarrow as pa

from .sse import read_events

PRODUCTS = pa.schema(
    [
        pa.field("sku", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("listed", pa.bool_()),
    ]
)
_WORD = re.compile(r"[a-z0-9]+")


class SearchIndex:
    """word -> skus, and the title indexed per sku."""

    def __init__(self) -> None:
        self.words: dict[str, set[str]] = defaultdict(set)
        self.titles: dict[str, str] = {}
        self.last_offset = 0

    def apply(self, event: dict[str, object]) -> None:
        """Apply one gateway event (``{"offset", "key", "data": {...}}``)."""
        data = event["data"]
        assert isinstance(data, dict)
        sku = str(data["sku"])
        old = self.titles.pop(sku, None)
        for w in _WORD.findall((old or "").lower()):
            self.words[w].discard(sku)
        if data.get("listed"):
            title = str(data.get("title") or "")
            self.titles[sku] = title
            for w in _WORD.findall(title.lower()):
                self.words[w].add(sku)
        offset = event["offset"]
        assert isinstance(offset, int)
        self.last_offset = offset

    def search(self, word: str) -> set[str]:
        """Skus whose current title has ``word``."""
        return set(self.words.get(word.lower(), ()))


async def follow(
    http: httpx.AsyncClient,
    sub_id: str,
    index: SearchIndex,
    *,
    until_offset: int,
    ack_every: int = 50,
    drop_after: int | None = None,
) -> int:
    """Follow the stream until ``until_offset`` is indexed; returns the reconnect count.
    ``drop_after`` closes the connection after that many events (to show a resume)."""
    reconnects, last_id, since_ack = 0, None, 0
    while True:
        headers: dict[str, str] = {} if last_id is None else {"Last-Event-ID": last_id}
        try:
            async with http.stream("GET", f"/subscriptions/{sub_id}/stream", headers=headers) as r:
                r.raise_for_status()
                seen = 0
                async for ev in read_events(r):
                    if ev.event == "resnapshot":
                        raise RuntimeError(f"rebuild the index from a snapshot: {ev.data}")
                    if ev.event != "event":
                        continue
                    index.apply(ev.json())
                    last_id, since_ack, seen = ev.id, since_ack + 1, seen + 1
                    if since_ack >= ack_every or index.last_offset >= until_offset:
                        await http.post(
                            f"/subscriptions/{sub_id}/ack", json={"offset": index.last_offset}
                        )
                        since_ack = 0
                    if index.last_offset >= until_offset:
                        return reconnects
                    if drop_after is not None and seen >= drop_after:
                        break
        except httpx.TransportError:
            await asyncio.sleep(0.2)
        reconnects += 1
