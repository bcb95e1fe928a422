"""The helper process that reads a SQLite file's pages into Arrow (see ``arrowread.py``).

Run as ``python -P _arrowchild.py DATABASE BUSY_TIMEOUT_MS`` by the store, never imported
by it: it imports only pyarrow and ``adbc-driver-sqlite``, whose own copy of SQLite must
not share a process with the store's ``sqlite3``. It answers requests on stdin until stdin
closes (the store closed it, or the store's process is gone).

The protocol, all integers little-endian: the helper first writes ``R`` (ready). A
request is the SQL's length (4 bytes), the rows per batch (8 bytes) and the SQL (UTF-8).
The answer is ``T``, a length (8 bytes) and the page as an Arrow IPC stream, or ``E``, a
length and an error message (UTF-8).
"""

from __future__ import annotations

import struct
import sys
from typing import Any, BinaryIO

#: SQLite's ADBC driver infers each column's type from the first rows of a batch; one batch
#: per page makes it look at every row of the page.
_BATCH_ROWS = "adbc.sqlite.query.batch_rows"


def _read(stream: BinaryIO, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _query(conn: Any, sql: str, batch_rows: int | None = None) -> Any:
    """``sql``'s result as an Arrow table (ADBC's low-level API: its DB-API module would
    import pandas, a few tenths of a second and 60 MB more per helper)."""
    import adbc_driver_manager as adbc
    import pyarrow as pa

    stmt = adbc.AdbcStatement(conn)
    try:
        if batch_rows is not None:
            stmt.set_options(**{_BATCH_ROWS: str(max(1, batch_rows))})
        stmt.set_sql_query(sql)
        handle, _ = stmt.execute_query()
        return pa.RecordBatchReader.from_stream(handle).read_all()
    finally:
        stmt.close()


def serve(database: str, busy_ms: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
    import adbc_driver_manager as adbc
    import adbc_driver_sqlite
    import pyarrow as pa

    db = adbc_driver_sqlite.connect(database)
    conn = adbc.AdbcConnection(db)  # autocommit: each query reads the latest commit
    _query(conn, f"PRAGMA busy_timeout={int(busy_ms)}")
    stdout.write(b"R")
    stdout.flush()
    try:
        while True:
            try:
                size, rows = struct.unpack("<IQ", _read(stdin, 12))
                sql = _read(stdin, size).decode()
            except EOFError:
                return
            try:
                table = _query(conn, sql, rows)
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, table.schema) as writer:
                    writer.write_table(table)
                out = sink.getvalue()
                stdout.write(b"T" + struct.pack("<Q", out.size))
                stdout.write(memoryview(out))
            except Exception as exc:  # the store reads this page as rows
                text = f"{type(exc).__name__}: {exc}".encode()[:4000]
                stdout.write(b"E" + struct.pack("<Q", len(text)) + text)
            stdout.flush()
    finally:
        conn.close()
        db.close()


def _import_pyarrow() -> None:
    """Import pyarrow without numpy where it can (numpy is an optional dependency of
    pyarrow since 16; nothing here needs it): half the helper's start, ~60 ms."""
    sys.modules["numpy"] = None  # type: ignore[assignment]  # import numpy: ImportError
    try:
        import pyarrow
    except ImportError:  # an older pyarrow that needs numpy: take it after all
        for name in [m for m in sys.modules if m.split(".")[0] in ("numpy", "pyarrow")]:
            del sys.modules[name]
        import pyarrow  # noqa: F401


if __name__ == "__main__":
    _import_pyarrow()
    serve(sys.argv[1], int(sys.argv[2]), sys.stdin.buffer, sys.stdout.buffer)
