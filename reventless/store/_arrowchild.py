"""The helper process that reads a store's pages into Arrow (see ``arrowhelper.py``).

Run as ``python -P _arrowchild.py KIND`` by the store (``sqlite`` or ``postgresql``), never
imported by it: it imports only pyarrow and the kind's ADBC driver. SQLite's carries its
own copy of SQLite, which must not share a process with the store's ``sqlite3``;
PostgreSQL's releases that read a page with the least CPU abort the process when a
connection is lost. It answers requests on stdin until stdin closes (the store closed it,
or the store's process is gone).

The protocol, all integers little-endian. The first message on stdin says what to open:
its length (4 bytes), SQLite's busy timeout in milliseconds (8 bytes) and the SQLite
file's path or PostgreSQL's libpq connection string (UTF-8; on stdin, not the command
line, where any user could read a password). The helper then writes ``R`` (ready). A
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


def _request(stdin: BinaryIO) -> tuple[str, int]:
    """The next message: its text and its number (``EOFError`` once stdin is closed)."""
    size, number = struct.unpack("<IQ", _read(stdin, 12))
    return _read(stdin, size).decode(), number


def _open(kind: str, target: str, busy_ms: int) -> tuple[Any, Any]:
    """The driver's database and connection handles (autocommit, as ADBC opens them:
    each query reads the latest commit)."""
    import adbc_driver_manager as adbc

    if kind == "postgresql":
        import adbc_driver_postgresql

        db = adbc_driver_postgresql.connect(target)
    else:
        import adbc_driver_sqlite

        db = adbc_driver_sqlite.connect(target)
    try:
        conn = adbc.AdbcConnection(db)
        if kind != "postgresql":
            _query(conn, f"PRAGMA busy_timeout={int(busy_ms)}")
    except BaseException:
        db.close()
        raise
    return db, conn


def serve(kind: str, stdin: BinaryIO, stdout: BinaryIO) -> None:
    import pyarrow as pa

    try:
        target, busy_ms = _request(stdin)
    except EOFError:
        return
    db, conn = _open(kind, target, busy_ms)
    # SQLite's driver infers each column's type from a batch's first rows: a page's rows
    # in one batch (PostgreSQL's types come from the server)
    batched = kind != "postgresql"
    stdout.write(b"R")
    stdout.flush()
    try:
        while True:
            try:
                sql, rows = _request(stdin)
            except EOFError:
                return
            try:
                table = _query(conn, sql, rows if batched else None)
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
    serve(sys.argv[1], sys.stdin.buffer, sys.stdout.buffer)
