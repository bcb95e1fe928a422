"""The keyring's own logic over a counting key store: concurrent new subjects share one
key-store call; a destroyed key id is never asked for again; damaged text reads as
erased."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection
from typing import Any

from reventless.codec import Plaintext, TopicSchema
from reventless.store.keys import Keyring, is_sealed
from tests.personal.model import Customer


class CountingKeys:
    def __init__(self) -> None:
        self.keys_by_subject: dict[str, tuple[str, bytes]] = {}
        self.creates: list[set[str]] = []
        self.lookups: list[set[str]] = []

    async def keys_for(self, subjects: Collection[str]) -> dict[str, tuple[str, bytes]]:
        self.creates.append(set(subjects))
        for s in subjects:
            self.keys_by_subject.setdefault(s, (f"id-{s}", os.urandom(32)))
        return {s: self.keys_by_subject[s] for s in subjects}

    async def keys(self, key_ids: Collection[str]) -> dict[str, bytes]:
        self.lookups.append(set(key_ids))
        by_id = dict(self.keys_by_subject.values())
        return {k: by_id[k] for k in key_ids if k in by_id}

    async def destroy(self, subject: str) -> int:
        return 1 if self.keys_by_subject.pop(subject, None) else 0


SCHEMA = TopicSchema.from_events("customers", list(Customer.event_classes))
NAME_AT = SCHEMA.personal[0][0] - 1  # rows of an append have no _offset
SUBJECT_AT = SCHEMA.personal[0][1] - 1


def row(subject: str, name: str) -> tuple[object, ...]:
    width = len(SCHEMA.arrow_schema) - 1
    values: list[object] = [None] * width
    values[NAME_AT], values[SUBJECT_AT] = Plaintext(f'"{name}"'), subject
    return tuple(values)


async def test_concurrent_new_subjects_share_one_key_store_call() -> None:
    store = CountingKeys()
    keyring = Keyring(store)
    sealed = await asyncio.gather(
        *(keyring.seal_rows(SCHEMA, [row(f"c-{i}", f"n{i}")]) for i in range(50))
    )
    assert len(store.creates) == 1 and len(store.creates[0]) == 50
    assert all(is_sealed(r[0][NAME_AT]) for r in sealed)
    await keyring.seal_rows(SCHEMA, [row("c-1", "again")])  # cached now
    assert len(store.creates) == 1


async def test_open_asks_once_per_unknown_key_and_never_for_a_destroyed_one() -> None:
    store = CountingKeys()
    writer, reader = Keyring(store), Keyring(store)
    rows = await writer.seal_rows(SCHEMA, [row("c-1", "Ada"), row("c-2", "Alan")])
    stored = [(0, *r) for r in rows]  # as read back: with an _offset
    opened = await reader.open_rows(SCHEMA, stored)
    assert [r[NAME_AT + 1].text for r in opened] == ['"Ada"', '"Alan"']
    await writer.forget("c-1")
    reader.ttl = 0.0
    again = await reader.open_rows(SCHEMA, stored)
    assert again[0][NAME_AT + 1] == stored[0][NAME_AT + 1]  # still sealed: reads as ERASED
    assert again[1][NAME_AT + 1].text == '"Alan"'
    asked = len(store.lookups)
    await reader.open_rows(SCHEMA, stored[:1])
    assert len(store.lookups) == asked  # the destroyed id is remembered
    damaged = stored[1][NAME_AT + 1][:-4] + "AAAA"
    assert reader.open_text(damaged) is None and reader.open_text("plain text") is None


async def test_another_key_store_plugs_into_an_app(file_url: str, monkeypatch: Any) -> None:
    """A KMS-like key store (here: keys held outside the database) replaces rv_keys: the
    App seals and opens with it, forget destroys through it, no master key is needed."""
    import reventless as rv
    from tests.personal.model import ADA, app_of, register_two

    monkeypatch.delenv("REVENTLESS_MASTER_KEY")
    kms = CountingKeys()
    app, customers = app_of(file_url)
    app.store.keyring = Keyring(kms)  # type: ignore[misc]
    async with app:
        await register_two(customers)
        await app.settle()
        assert (await customers.load("c-1")).name == ADA
        assert set(kms.keys_by_subject) == {"c-1", "c-2"}
        assert await app.forget("c-1") == rv.Forgotten(keys=1, rows=1)
        assert (await customers.load("c-1")).name is rv.ERASED
