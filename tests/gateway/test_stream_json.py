"""The SSE stream sends, byte for byte, the JSON the per-event encoder wrote before the bulk
one (``tests/subscribe/test_encode.py`` holds that reference), pages of many events at a
time included, with and without a projection."""

from __future__ import annotations

import httpx
import pytest

from reventless.subscribe import Subscriptions
from tests.gateway.conftest import auth, serve
from tests.subscribe.test_encode import all_types_table, legacy_events, sse_json, stored_rows

OPERATOR = auth("operator-token")


@pytest.mark.parametrize("columns", [None, ["key", "ts", "blob", "nested", "f64", "doc"]])
async def test_stream_data_lines_are_the_per_event_json(
    db_url: str, columns: list[str] | None
) -> None:
    info, rows = await stored_rows(db_url, all_types_table(40))
    want = [sse_json(ev) for ev in legacy_events(info, rows, columns)]
    query = "" if columns is None else "?columns=" + ",".join(columns)
    async with (
        serve(db_url, stream_batch=16) as base,  # 40 events: pages of 16, 16, 8
        httpx.AsyncClient(base_url=base, headers=OPERATOR) as http,
    ):
        sid = (await http.post("/subscriptions", json={"topic": "all"})).json()["id"]
        ids, data, frame = [], [], {}
        async with http.stream("GET", f"/subscriptions/{sid}/stream{query}", timeout=30) as s:
            async for line in s.aiter_lines():
                if line:
                    name, _, value = line.partition(": ")
                    frame[name] = value
                    continue
                if frame.get("event") == "event":
                    ids.append(int(frame["id"]))
                    data.append(frame["data"])
                frame = {}
                if len(ids) == 40:
                    break
    assert ids == list(range(1, 41))
    assert data == want
    async with Subscriptions.from_url(db_url) as subs:  # streaming acked nothing
        assert (await subs.get(sid)).acked == 0


async def test_events_page_with_nan_floats_is_not_a_500(db_url: str) -> None:
    """A stored NaN float (the all-types table has one; PostgreSQL keeps it) comes back as
    the stream writes it, the token ``NaN``, not as a 500 from a strict JSON encoder."""
    await stored_rows(db_url, all_types_table(8))
    async with (
        serve(db_url) as base,
        httpx.AsyncClient(base_url=base, headers=OPERATOR) as http,
    ):
        sid = (await http.post("/subscriptions", json={"topic": "all"})).json()["id"]
        got = await http.get(f"/subscriptions/{sid}/events", params={"limit": 8})
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("application/json")
    events = got.json()["events"]
    assert [e["offset"] for e in events] == list(range(1, 9))
    f64 = events[1]["data"]["f64"]  # the stored NaN: SQLite keeps it as NULL
    assert f64 is None or f64 != f64
