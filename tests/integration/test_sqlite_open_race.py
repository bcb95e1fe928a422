"""Opening a SQLite file store while another connection reads it: the switch to WAL
mode takes an exclusive lock that SQLite refuses at once (no busy wait) while anyone
reads, so ``open`` retries it instead of failing with "database is locked" (seen when
eight processes opened one fresh file together)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from reventless.store import Database


def test_open_waits_out_a_reader_of_a_fresh_file(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE t (n INTEGER)")  # a rollback-journal file, as created
    other.execute("BEGIN")
    other.execute("SELECT count(*) FROM t").fetchone()  # holds a read lock
    release = threading.Timer(0.1, lambda: other.execute("COMMIT"))
    release.start()
    db = Database(f"sqlite:///{path}")
    try:
        db.open_sync()
        mode = db.read_sync(lambda c: c.exec_driver_sql("PRAGMA journal_mode").scalar())
        assert mode == "wal"
    finally:
        release.join()
        db._dispose()
        other.close()
