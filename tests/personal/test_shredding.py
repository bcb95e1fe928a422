"""Crypto-shredding, proven on the bytes: after ``app.forget``, no plaintext of the
subject is left in the SQLite files, a ``pg_dump`` of the PostgreSQL schema, the broker's
stored messages or an exported segment. (Events never held plaintext there at all:
only the read model copied it, and its ``on_forget`` hook overwrote it.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pyarrow.parquet as pq
import pytest

import reventless as rv
from tests.nats_server import NatsServer
from tests.personal.model import ADA, ADA_MAIL, ALAN, Register, app_of, register_two
from tests.services import unavailable

#: Every piece of c-1's personal data, as the files would hold it.
SECRETS = (ADA, ADA_MAIL, "St James", "1815-12-10")


def found_in(blob: bytes) -> list[str]:
    return [s for s in SECRETS if s.encode() in blob]


def files_blob(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


async def test_sqlite_files_hold_no_plaintext_after_forget(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    app, customers = app_of(f"sqlite:///{store / 'shop.db'}")
    async with app:
        await register_two(customers)
        await app.settle()
        export = tmp_path / "customers.parquet"
        await customers.export_parquet(export)
        assert found_in(export.read_bytes()) == []  # segments hold sealed text only
        sealed = pq.read_table(export).column("name").to_pylist()
        assert all(v is None or v.startswith("rv1:") for v in sealed)
        assert ADA.encode() in files_blob(store)  # the read model's copy, before forgetting
        await app.forget("c-1")
        assert found_in(files_blob(store)) == []  # db, -wal and -shm files
        assert ALAN.encode() in files_blob(store)  # others untouched
        assert (await customers.load("c-1")).name is rv.ERASED


def pg_dump(url: str) -> bytes:
    binary = shutil.which("pg_dump")
    if binary is None:
        unavailable("pg_dump is not installed (Debian: postgresql-client)")
    assert binary is not None
    parts = urlsplit(url.replace("postgresql+psycopg://", "postgresql://"))
    schema = parse_qs(parts.query)["options"][0].split("=", 1)[1]
    conninfo = f"postgresql://{parts.netloc}{parts.path}"
    return subprocess.run(
        [binary, "--dbname", conninfo, "--schema", schema, "--data-only"],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout


@pytest.mark.postgres
async def test_pg_dump_holds_no_plaintext_after_forget(pg_url: str) -> None:
    app, customers = app_of(pg_url)
    async with app:
        await register_two(customers)
        await app.settle()
        before = pg_dump(pg_url)
        assert ADA.encode() in before and b"rv1:" in before  # read model; sealed events
        await app.forget("c-1")
        after = pg_dump(pg_url)
        assert found_in(after) == [] and ALAN.encode() in after


@pytest.mark.nats
async def test_broker_messages_never_hold_plaintext(
    tmp_path: Path, nats_server: NatsServer
) -> None:
    """JetStream's file store (the messages the relay published, kept by the stream)."""
    from tests.nats_server import nats_binary

    server = NatsServer(nats_binary(), tmp_path / "nats")
    server.start()
    try:
        app, customers = app_of(
            f"sqlite:///{tmp_path / 'shop.db'}", f"{server.url}?prefix=pd&backoff=0.05"
        )
        async with app:
            await register_two(customers)
            await app.settle()
            assert (await app.tables["pd_directory"].get("c-1")) is not None
            stored = files_blob(tmp_path / "nats")
            assert b"Customer" in stored  # the stream really holds the messages
            assert found_in(stored) == []
            await app.forget("c-1")
            await customers.execute("c-3", Register(name=ADA, city="x"))
            await app.settle()
            assert found_in(files_blob(tmp_path / "nats")) == []
    finally:
        server.stop()
