"""Keys of data subjects: the key store port, its SQL table, and the keyring that seals
and opens personal fields (``rv.Personal``) with them.

Each data subject has one random AES-256 key (its data key), created the first time an
event carries personal data of that subject. The SQL key store keeps data keys in
``rv_keys``, wrapped (AES-GCM) under the master key; the master key itself never
reaches the database: it comes from ``REVENTLESS_MASTER_KEY`` (URL-safe base64 of 32
bytes) or the file named by ``REVENTLESS_MASTER_KEY_FILE``. Another key store (a KMS)
plugs in through the ``KeyStore`` Protocol.

A sealed value is text: ``rv1:<key id>:<base64(nonce | AES-GCM ciphertext)>``, with
the key id as associated data. The plaintext is the value's JSON text. Destroying a
subject's key (``forget``) makes every value sealed with it unreadable for good:
readers get the ``ERASED`` placeholder (crypto-shredding). SQLite deletes the key row
with ``secure_delete`` and checkpoints the WAL so no copy of the wrapped key is left in
the file; PostgreSQL's ``VACUUM`` of ``rv_keys`` then removes the dead row version.

Example::

    keyring = Keyring(SqlKeyStore(db), MasterKey.from_env())
    rows = await keyring.seal_rows(schema, rows)   # before an append
    rows = await keyring.open_rows(schema, rows)   # before decoding
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import sqlalchemy as sa
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.engine import Connection

from ..codec import FIELDS_AT, Plaintext, TopicSchema
from ..errors import KeyringError
from . import tables
from .database import Database

__all__ = [
    "KeyStore",
    "Keyring",
    "MasterKey",
    "SqlKeyStore",
    "is_sealed",
]

#: The prefix of sealed text (format version 1).
SEALED_PREFIX = "rv1:"
_AT = len(SEALED_PREFIX)
_NONCE = 12
_CHUNK = 500

keys_table = sa.Table(
    "rv_keys",
    tables.metadata,
    sa.Column("key_id", sa.String(40), primary_key=True),
    sa.Column("subject", sa.String(400), nullable=False, unique=True),
    sa.Column("wrapped", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)
"""Data keys of subjects, wrapped under the master key (one per subject)."""


def is_sealed(value: object) -> bool:
    """Whether ``value`` is sealed text (a personal field's stored value)."""
    return isinstance(value, str) and value.startswith(SEALED_PREFIX)


@dataclass(frozen=True, slots=True, repr=False)
class MasterKey:
    """The key that wraps every data key (32 bytes; never stored by reventless)."""

    key: bytes

    def __post_init__(self) -> None:
        if len(self.key) != 32:
            raise KeyringError(f"the master key must be 32 bytes, got {len(self.key)}")

    def __repr__(self) -> str:
        return "MasterKey(...)"

    @classmethod
    def generate(cls) -> MasterKey:
        """A new random master key (``text`` gives what ``REVENTLESS_MASTER_KEY`` holds)."""
        return cls(os.urandom(32))

    @property
    def text(self) -> str:
        """URL-safe base64 of the key, the form ``REVENTLESS_MASTER_KEY`` takes."""
        return base64.urlsafe_b64encode(self.key).decode()

    @classmethod
    def parse(cls, text: str) -> MasterKey:
        """A master key from its URL-safe base64 text (``KeyringError`` if malformed)."""
        try:
            raw = base64.urlsafe_b64decode(text.strip().encode() + b"==")
        except (binascii.Error, ValueError) as exc:
            raise KeyringError("the master key is not URL-safe base64") from exc
        return cls(raw)

    @staticmethod
    def configured() -> bool:
        """Whether the environment names a master key (``from_env`` may still find it
        malformed)."""
        return bool(
            os.environ.get("REVENTLESS_MASTER_KEY") or os.environ.get("REVENTLESS_MASTER_KEY_FILE")
        )

    @classmethod
    def from_env(cls) -> MasterKey:
        """From ``REVENTLESS_MASTER_KEY``, else the file ``REVENTLESS_MASTER_KEY_FILE``
        (its text); ``KeyringError`` when neither is set or the key is malformed."""
        text = os.environ.get("REVENTLESS_MASTER_KEY")
        if text:
            return cls.parse(text)
        path = os.environ.get("REVENTLESS_MASTER_KEY_FILE")
        if path:
            try:
                return cls.parse(Path(path).read_text())
            except OSError as exc:
                raise KeyringError(f"cannot read the master key file: {exc.strerror}") from exc
        raise KeyringError(
            "events with personal data need a master key: set REVENTLESS_MASTER_KEY "
            "(URL-safe base64 of 32 bytes) or REVENTLESS_MASTER_KEY_FILE"
        )

    def wrap(self, key_id: str, key: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        return nonce + AESGCM(self.key).encrypt(nonce, key, b"rv-key:" + key_id.encode())

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        try:
            return AESGCM(self.key).decrypt(
                wrapped[:_NONCE], wrapped[_NONCE:], b"rv-key:" + key_id.encode()
            )
        except InvalidTag as exc:
            raise KeyringError(
                f"data key {key_id} does not open with this master key (wrong key?)"
            ) from exc


class KeyStore(Protocol):
    """Where data keys live. The SQL one wraps them under a master key; a KMS-backed one
    would wrap or generate them there."""

    async def keys_for(self, subjects: Collection[str]) -> dict[str, tuple[str, bytes]]:
        """``subject -> (key id, data key)`` for each of ``subjects``, creating the keys
        that do not exist yet (durably, before this returns)."""
        ...

    async def keys(self, key_ids: Collection[str]) -> dict[str, bytes]:
        """``key id -> data key`` of the ids that exist (destroyed or unknown ids are
        absent)."""
        ...

    async def destroy(self, subject: str) -> int:
        """Destroy the subject's key(s) for good; the number destroyed."""
        ...


class SqlKeyStore:
    """Data keys in the store's own database (``rv_keys``), wrapped under ``master``
    (default: ``MasterKey.from_env()``, read when a key is first wrapped or unwrapped;
    destroying keys needs none)."""

    def __init__(self, db: Database, master: MasterKey | None = None) -> None:
        self.db = db
        self._master = master

    @property
    def master(self) -> MasterKey:
        """The master key (``KeyringError`` when none is configured)."""
        if self._master is None:
            self._master = MasterKey.from_env()
        return self._master

    def require(self) -> None:
        """Fail now (``KeyringError``) if there is no usable master key."""
        _ = self.master

    async def keys_for(self, subjects: Collection[str]) -> dict[str, tuple[str, bytes]]:
        wanted = sorted(set(subjects))
        if not wanted:
            return {}
        fresh = {s: (uuid.uuid4().hex, os.urandom(32)) for s in wanted}
        now = int(time.time() * 1_000_000)
        rows = [(kid, s, self.master.wrap(kid, key), now) for s, (kid, key) in fresh.items()]
        db = self.db

        def run(conn: Connection) -> tuple[set[str], list[Any]]:
            # The new keys come back from RETURNING; only subjects that had one already
            # (another writer's, or a race) are read back and unwrapped.
            mine: set[str] = set()
            for i in range(0, len(rows), _CHUNK // 4):
                chunk = rows[i : i + _CHUNK // 4]
                values = ", ".join(f"({db.placeholders(4)})" for _ in chunk)
                sql = (
                    f"INSERT INTO rv_keys (key_id, subject, wrapped, created_at) VALUES {values} "
                    "ON CONFLICT (subject) DO NOTHING RETURNING subject"
                )
                params = tuple(v for r in chunk for v in r)
                mine.update(str(r[0]) for r in conn.exec_driver_sql(sql, params))
            theirs = [s for s in wanted if s not in mine]
            found: list[Any] = []
            for i in range(0, len(theirs), _CHUNK):
                chunk_s = theirs[i : i + _CHUNK]
                sql = (
                    "SELECT subject, key_id, wrapped FROM rv_keys "
                    f"WHERE subject IN ({db.placeholders(len(chunk_s))})"
                )
                found.extend(conn.exec_driver_sql(sql, tuple(chunk_s)))
            return mine, found

        mine, found = await db.write(run)
        out = {s: fresh[s] for s in mine}
        out.update((str(s), (str(k), self.master.unwrap(str(k), bytes(w)))) for s, k, w in found)
        return out

    async def keys(self, key_ids: Collection[str]) -> dict[str, bytes]:
        ids = sorted(set(key_ids))
        if not ids:
            return {}

        def run(conn: Connection) -> list[Any]:
            out: list[Any] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                q = sa.select(keys_table.c.key_id, keys_table.c.wrapped).where(
                    keys_table.c.key_id.in_(chunk)
                )
                out.extend(conn.execute(q))
            return out

        found = await self.db.read(run)
        return {str(k): self.master.unwrap(str(k), bytes(w)) for k, w in found}

    async def destroy(self, subject: str) -> int:
        sqlite = self.db.is_sqlite

        def run(conn: Connection) -> int:
            if sqlite:  # overwrite the deleted row's bytes instead of leaving them free
                conn.exec_driver_sql("PRAGMA secure_delete = ON")
            try:
                res = conn.execute(sa.delete(keys_table).where(keys_table.c.subject == subject))
            finally:
                if sqlite:
                    conn.exec_driver_sql("PRAGMA secure_delete = OFF")
            return int(res.rowcount or 0)

        n = await self.db.write(run)
        if n:
            await self.purge()
        return n

    async def purge(self) -> None:
        """Drop old copies of deleted or overwritten rows. SQLite: checkpoint the WAL
        into the file and truncate it (the file's own pages were overwritten with
        ``secure_delete``); best effort, a reader in the middle of a long read can keep
        the WAL. PostgreSQL keeps dead row versions in the table's pages until VACUUM
        reuses them; no query or ``pg_dump`` sees them."""
        path = self.db.url.database
        if self.db.is_sqlite and not self.db.is_memory and path:
            await asyncio.to_thread(_checkpoint, path)


class Keyring:
    """Seals and opens personal fields with the subjects' keys, caching them.

    Keys found are cached for ``ttl`` seconds, so another process's ``forget`` takes
    effect here within that time (this process's ``forget`` at once). Destroyed key ids
    are remembered for good (ids are never reused).
    """

    def __init__(self, store: KeyStore, *, ttl: float = 30.0, max_keys: int = 100_000) -> None:
        self.store = store
        self.ttl = ttl
        self.max_keys = max_keys
        self._by_subject: dict[str, tuple[str, float]] = {}
        self._by_id: dict[str, tuple[AESGCM, float]] = {}
        self._gone: set[str] = set()
        self._wanted: set[str] = set()
        self._flight: asyncio.Future[dict[str, tuple[str, AESGCM]]] | None = None

    # -- cache ------------------------------------------------------------------------------

    def _fresh(self, stamp: float) -> bool:
        return time.monotonic() - stamp < self.ttl

    def _remember(self, key_id: str, key: bytes, subject: str | None = None) -> None:
        if len(self._by_id) >= self.max_keys:
            self._by_id.clear()
            self._by_subject.clear()
        now = time.monotonic()
        self._by_id[key_id] = (AESGCM(key), now)
        if subject is not None:
            self._by_subject[subject] = (key_id, now)

    def _cipher(self, key_id: str) -> AESGCM | None:
        hit = self._by_id.get(key_id)
        return hit[0] if hit is not None and self._fresh(hit[1]) else None

    # -- sealing ----------------------------------------------------------------------------

    async def seal_rows(
        self, schema: TopicSchema, rows: Sequence[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        """``rows`` of an append (stored rows without their ``_offset``) with each personal
        field's ``Plaintext`` sealed with its subject's key (keys are created as needed).
        Another value there that is not sealed yet (an Arrow or dict publish) is taken as
        the value itself."""
        if not schema.personal:
            return [tuple(r) for r in rows]
        cols = [(at - 1, subject_at - 1) for at, subject_at in schema.personal]
        rows = [_plain(r, cols) for r in rows]
        subjects: set[str] = set()
        for r in rows:
            for at, subject_at in cols:
                if type(r[at]) is Plaintext:
                    subjects.add(_subject(r, subject_at, schema, at))
        keys = await self._subject_keys(subjects)
        out = []
        for r in rows:
            row = list(r)
            for at, subject_at in cols:
                v = row[at]
                if type(v) is Plaintext:
                    found = keys[_subject(r, subject_at, schema, at)]
                    row[at] = _seal(found[0], found[1], v.text)
            out.append(tuple(row))
        return out

    async def seal_text(self, subject: str, text: str) -> str:
        """``text`` sealed with ``subject``'s key (an aggregate snapshot, say)."""
        kid, cipher = (await self._subject_keys({subject}))[subject]
        return _seal(kid, cipher, text)

    async def _subject_keys(self, subjects: Collection[str]) -> dict[str, tuple[str, AESGCM]]:
        """The key of each subject: cached, else fetched or created. Concurrent callers
        (commands on new subjects running at once) share one key-store transaction."""
        out: dict[str, tuple[str, AESGCM]] = {}
        missing = set()
        for s in subjects:
            found = self._subject_key(s)
            if found is None:
                missing.add(s)
            else:
                out[s] = found
        if not missing:
            return out
        self._wanted.update(missing)
        if self._flight is None:
            self._flight = asyncio.ensure_future(self._create_wanted())
        created = await asyncio.shield(self._flight)
        for s in missing:
            if s not in created:  # pragma: no cover - keys_for returns every subject
                raise KeyringError("the key store returned no key for a subject")
            out[s] = created[s]
        return out

    async def _create_wanted(self) -> dict[str, tuple[str, AESGCM]]:
        await asyncio.sleep(0)  # let the commands running alongside add their subjects
        wanted, self._wanted, self._flight = self._wanted, set(), None
        out = {}
        for s, (kid, key) in (await self.store.keys_for(wanted)).items():
            self._remember(kid, key, s)
            out[s] = (kid, self._by_id[kid][0])
        return out

    async def open_sealed(self, value: str) -> str | None:
        """The text sealed in ``value`` (``seal_text``), None once its key is destroyed."""
        ciphers = await self.prefetch([_key_id(value)]) if is_sealed(value) else {}
        return self.open_text(value, ciphers)

    def _subject_key(self, subject: str) -> tuple[str, AESGCM] | None:
        hit = self._by_subject.get(subject)
        if hit is None or not self._fresh(hit[1]):
            return None
        cipher = self._cipher(hit[0])
        return None if cipher is None else (hit[0], cipher)

    # -- opening ----------------------------------------------------------------------------

    async def prefetch(self, key_ids: Collection[str]) -> dict[str, AESGCM]:
        """The ciphers of ``key_ids`` that exist, loading those not cached (destroyed
        ones are noted for good)."""
        out: dict[str, AESGCM] = {}
        missing = set()
        for k in key_ids:
            cipher = self._cipher(k)
            if cipher is not None:
                out[k] = cipher
            elif k not in self._gone:
                missing.add(k)
        if missing:
            found = await self.store.keys(missing)
            for kid, key in found.items():
                self._remember(kid, key)
                out[kid] = self._by_id[kid][0]
            self._gone.update(missing - found.keys())
        return out

    async def open_rows(self, schema: TopicSchema, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """``rows`` with each sealed personal value opened (``Plaintext``); values whose key
        is destroyed stay sealed (they decode as ``ERASED``). Rows without personal columns
        come back as they are."""
        cols = schema.personal
        if not cols or not rows:
            return list(rows)
        ciphers = await self.prefetch(
            {_key_id(v) for r in rows for at, _ in cols if is_sealed(v := r[at])}
        )
        return [self.open_row(cols, r, ciphers) for r in rows]

    async def shown_rows(
        self, schema: TopicSchema, rows: Sequence[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        """``rows`` with each personal value as text to show: a string value as itself,
        another as its JSON text, ``"[erased]"`` when its key is destroyed."""
        out = []
        for r in await self.open_rows(schema, rows):
            row = list(r)
            for at, _ in schema.personal:
                v = row[at]
                if v is not None:
                    row[at] = _shown(v.text if type(v) is Plaintext else None)
            out.append(tuple(row))
        return out

    def open_row(
        self,
        cols: Sequence[tuple[int, int]],
        row: Sequence[Any],
        ciphers: Mapping[str, AESGCM] | None = None,
    ) -> tuple[Any, ...]:
        """One row opened with ``ciphers`` (``prefetch``) or the cached keys."""
        out = list(row)
        for at, _ in cols:
            text = self.open_text(out[at], ciphers)
            if text is not None:
                out[at] = Plaintext(text)
        return tuple(out)

    def open_text(self, value: object, ciphers: Mapping[str, AESGCM] | None = None) -> str | None:
        """The JSON text sealed in ``value``, or None (not sealed, or its key is gone):
        opened with ``ciphers`` (``prefetch``), else the cached keys."""
        if not is_sealed(value):
            return None
        assert isinstance(value, str)
        try:
            cut = value.index(":", _AT)
            key_id = value[_AT:cut]
            cipher = (ciphers or {}).get(key_id) or self._cipher(key_id)
            if cipher is None:
                return None
            raw = binascii.a2b_base64(value[cut + 1 :])
            return cipher.decrypt(raw[:_NONCE], raw[_NONCE:], key_id.encode()).decode()
        except (ValueError, binascii.Error, InvalidTag):
            return None  # damaged or foreign text reads as erased, never as a failure

    async def open_batch(self, schema: TopicSchema, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with its personal columns opened: a string value shows as itself,
        any other value as its JSON text, a forgotten one as ``"[erased]"``."""
        if not schema.personal or batch.num_rows == 0:
            return batch
        names = [schema.columns[at - FIELDS_AT].name for at, _ in schema.personal]
        columns = {n: batch.column(n).to_pylist() for n in names if n in batch.schema.names}
        ciphers = await self.prefetch(
            {_key_id(v) for values in columns.values() for v in values if is_sealed(v)}
        )
        arrays = list(batch.columns)
        for n, values in columns.items():
            arrays[batch.schema.get_field_index(n)] = pa.array(
                [None if v is None else _shown(self.open_text(v, ciphers)) for v in values],
                pa.string(),
            )
        return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)

    # -- forgetting -------------------------------------------------------------------------

    def require(self) -> None:
        """Fail now (``KeyringError``) if the key store cannot seal or open (no master
        key): the App calls it at start when a topic has personal fields."""
        require = getattr(self.store, "require", None)
        if require is not None:
            require()

    async def purge(self) -> None:
        """Let the key store drop old copies of what was overwritten (``SqlKeyStore``:
        SQLite's WAL frames, PostgreSQL's dead rows); a no-op for stores without one."""
        purge = getattr(self.store, "purge", None)
        if purge is not None:
            await purge()

    async def forget(self, subject: str) -> int:
        """Destroy ``subject``'s key; cached copies in this process go at once."""
        n = await self.store.destroy(subject)
        hit = self._by_subject.pop(subject, None)
        if hit is not None:
            self._by_id.pop(hit[0], None)
            self._gone.add(hit[0])
        return n


def _key_id(sealed: str) -> str:
    return sealed[_AT : sealed.find(":", _AT)]


def _checkpoint(path: str) -> None:
    conn = sqlite3.connect(path, timeout=5.0)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _plain(row: Sequence[Any], cols: Sequence[tuple[int, int]]) -> Sequence[Any]:
    if all(row[at] is None or type(row[at]) is Plaintext for at, _ in cols):
        return row
    out = list(row)
    for at, _ in cols:
        v = out[at]
        if v is not None and type(v) is not Plaintext and not is_sealed(v):
            out[at] = Plaintext(json.dumps(v, separators=(",", ":"), ensure_ascii=False))
    return out


def _subject(row: Sequence[Any], subject_at: int, schema: TopicSchema, at: int) -> str:
    value = row[subject_at]
    if value is None or value == "":
        raise KeyringError(
            f"topic {schema.name!r}: an event has personal data "
            f"({schema.columns[at + 1 - FIELDS_AT].name}) but no data subject id"
        )
    return value if isinstance(value, str) else str(value)


def _seal(key_id: str, cipher: AESGCM, text: str) -> str:
    nonce = os.urandom(_NONCE)
    body = nonce + cipher.encrypt(nonce, text.encode(), key_id.encode())
    return f"{SEALED_PREFIX}{key_id}:{binascii.b2a_base64(body, newline=False).decode()}"


def _shown(text: str | None) -> str:
    if text is None:
        return "[erased]"
    value = json.loads(text)
    return value if isinstance(value, str) else text
