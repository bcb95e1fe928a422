"""Pages read into Arrow by helper processes (``_arrowchild.py``): a SQLite file's and
PostgreSQL's.

An ADBC driver reads a query's result straight into Arrow, but neither runs well in the
store's process. ``adbc-driver-sqlite`` carries its own copy of the SQLite library: two
copies in one process that open one database file break each other's POSIX locks and WAL
index (SQLite's "How To Corrupt" guide, 2.2; a reader crashed with SIGBUS while the store
wrote); to SQLite the helpers are other processes sharing the file, which WAL is made for.
``adbc-driver-postgresql`` reads a page with less than half the CPU in its releases
before 1.9 as in later ones, but those abort their process when a connection is lost
(BENCHMARKS.md); a helper that aborts takes only itself down. Either way the reading's CPU
is the helper's, beside the store's process and its GIL. A page comes back as an Arrow
IPC stream over a pipe.

A helper costs a process (about 0.09 s of CPU to start and 65 MB), so helpers start
only when a read has many rows left (``SPAWN_AT``): small reads, and the pages read while
a helper starts, go through rows (a read with ``WAIT_AT`` rows left waits for it instead).
A helper is asked up to ``DEPTH`` pages at once and reads them in turn (it reads the next
while the last crosses the pipe); another starts when the ready ones have ``DEPTH`` pages
asked each, up to ``HELPERS`` per store, and a page that finds them all full waits for the
next answer. A helper that fails, dies or takes over ``_START_LIMIT`` seconds to start is
dropped (its pages go through rows) and others start after ``RETRY_AFTER`` seconds.
Closing the store closes their pipes and they exit; so do they when the store's process
is gone (their stdin closes).
"""

from __future__ import annotations

import contextlib
import logging
import select
import struct
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import IO, NamedTuple

import pyarrow as pa

log = logging.getLogger("reventless.store")

#: Rows left to read from which a read starts a helper.
SPAWN_AT = 20_000
#: Helpers per store (pages after the first are read two at a time).
HELPERS = 2
#: Seconds without new helpers after one failed.
RETRY_AFTER = 30.0
#: Pages asked of one helper at a time (it reads the next while the last is taken in).
DEPTH = 2
#: Seconds a page waits for a busy helper before it is read as rows.
_WAIT = 5.0
_CHILD = Path(__file__).with_name("_arrowchild.py")
#: The pipe a helper answers through (a page of 10,000 events is about 2 MB).
_PIPE_BYTES = 1 << 20
#: A read with this many rows left waits for a starting helper instead of reading rows.
WAIT_AT = 100_000
#: Seconds a helper may take to start before it counts as failed.
_START_LIMIT = 10.0


class HelperError(Exception):
    """A helper could not read a page (it said why, or it is gone)."""


def _read(stream: IO[bytes], n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise HelperError("the helper process is gone")
    return data


def _close_all(*pipes: IO[bytes]) -> None:
    for pipe in pipes:
        with contextlib.suppress(OSError):
            pipe.close()


class Helper:
    """One helper process reading pages of one store: ``kind`` (``sqlite`` or
    ``postgresql``), ``target`` (the SQLite file, or libpq's connection string). Requests
    are pipelined: a page can be asked for while the helper still reads the one before
    (``send``); answers come back in the order asked (``receive``), so the helper never
    waits for the next ask."""

    def __init__(self, kind: str, target: str, busy_ms: int) -> None:
        self.proc = subprocess.Popen(  # -P: nothing of the helper's folder shadows a module
            [sys.executable, "-P", str(_CHILD), kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.ready = False
        self.started = time.monotonic()
        #: Pages asked and not yet answered (kept by the pool, under its lock).
        self.load = 0
        self._turn = threading.Condition()
        self._sent = self._answered = 0
        self._broken: str | None = None
        import fcntl  # (POSIX only, as helpers are: see ArrowPages)

        with contextlib.suppress(OSError, AttributeError):  # Linux: pages in fewer chunks
            fcntl.fcntl(self._pipes[1].fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        # A helper dropped without ``close`` (its store never closed): its pipes close now,
        # so it exits (the Popen object outlives it, kept by subprocess to reap the child,
        # and with it the pipes: a PostgreSQL helper would keep its connection open).
        self._pipes_closed = weakref.finalize(self, _close_all, *self._pipes)
        # what to open, before any request (a write the pipe takes at once; a helper that
        # died before reading it fails its start in ``poll``)
        data = target.encode()
        with contextlib.suppress(OSError, ValueError):
            self._pipes[0].write(struct.pack("<IQ", len(data), busy_ms) + data)
            self._pipes[0].flush()

    @property
    def _pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        return stdin, stdout

    def poll(self) -> bool:
        """Whether the helper is ready (without waiting); ``HelperError`` if it died."""
        if self.ready:
            return True
        stdout = self._pipes[1]
        if select.select([stdout], [], [], 0)[0]:
            if _read(stdout, 1) != b"R":
                raise HelperError("the helper process did not start")
            self.ready = True
        elif self.proc.poll() is not None:
            raise HelperError(f"the helper process exited ({self.proc.returncode})")
        return self.ready

    def send(self, sql: str, rows: int) -> int:
        """Ask for the result of ``sql``; returns the ticket ``receive`` takes."""
        data = sql.encode()
        with self._turn:
            if self._broken is not None:
                raise HelperError(self._broken)
            try:  # (a request is small: the pipe takes it while the helper reads a page)
                stdin = self._pipes[0]
                stdin.write(struct.pack("<IQ", len(data), rows) + data)
                stdin.flush()
            except (OSError, ValueError) as exc:
                self._broken = f"the helper process is gone: {exc}"
                self._turn.notify_all()
                raise HelperError(self._broken) from None
            self._sent += 1
            return self._sent - 1

    def receive(self, ticket: int) -> pa.Table:
        """The answer to ``ticket`` as an Arrow table, once the answers before it are read;
        ``HelperError`` if the helper could not read it (or is gone: every later ticket
        fails too)."""
        with self._turn:
            while self._answered != ticket and self._broken is None:
                self._turn.wait()
            if self._broken is not None:
                raise HelperError(self._broken)
        try:
            stdout = self._pipes[1]
            kind = _read(stdout, 1)
            (size,) = struct.unpack("<Q", _read(stdout, 8))
            body = _read(stdout, size)
        except (HelperError, OSError, ValueError) as exc:
            with self._turn:
                self._broken = str(exc) or "the helper process is gone"
                self._turn.notify_all()
            raise HelperError(str(exc)) from None
        with self._turn:
            self._answered += 1
            self._turn.notify_all()
        if kind != b"T":
            raise HelperError(body.decode(errors="replace"))
        return pa.ipc.open_stream(body).read_all()

    def close(self, *, wait: bool = True) -> None:
        """Close its pipes (it exits on end of input); ``wait``: until it has, killing it
        if it takes more than 2 s."""
        with self._turn:
            self._broken = self._broken or "the helper was closed"
            self._turn.notify_all()
        self._pipes_closed()
        if wait:
            self.wait()

    def wait(self) -> None:
        """Wait for the helper to exit (after ``close``); kill it after 2 s."""
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Asked(NamedTuple):
    """A page asked of a helper (``HelperPool.ask``): its answer is ``HelperPool.answer``."""

    helper: Helper
    ticket: int


class HelperPool:
    """The helper processes of one store (started on demand, up to ``HELPERS``): ``kind``,
    ``target`` and ``busy_ms`` as ``Helper`` takes them."""

    def __init__(self, kind: str, target: str, busy_ms: int = 0) -> None:
        self.kind, self.target, self.busy_ms = kind, target, busy_ms
        self._lock = threading.Lock()
        #: Signalled when a helper answers a page (or is dropped).
        self._answered = threading.Condition(self._lock)
        self._ready: list[Helper] = []
        self._starting: list[Helper] = []
        self._closed = False
        self._retry_at = 0.0

    def usable(self) -> bool:
        """Whether pages may still be asked for (the pool is not closed)."""
        return not self._closed

    def wanted(self, remaining: int) -> bool:
        """Whether ``page`` could read a page of a read with ``remaining`` rows left as
        Arrow, now or by starting a helper (else it is read as rows at once)."""
        with self._lock:
            return not self._closed and bool(self._ready or self._starting or remaining >= SPAWN_AT)

    def page(self, sql: str, rows: int, remaining: int) -> pa.Table | None:
        """``sql``'s result through a ready helper: the one with the fewest pages asked
        (fewer than ``DEPTH``: it reads this one next), else the first to answer. None
        (read it as rows) while none is ready: then one starts if ``remaining`` rows make
        it worth it, as another does when the helpers have ``DEPTH`` pages asked each. A
        catch-up that asks two pages at a time keeps one helper (the other core commits
        its batches); ``read_batches``, four at a time, gets two."""
        with self._answered:
            while True:
                asked = self._ask(sql, rows, remaining, start=True)
                if asked is not None:
                    break
                if self._closed:
                    return None
                if not self._ready:
                    if not self._starting or remaining < WAIT_AT:
                        return None
                    # a long read: its pages come faster after the wait (~0.07 s) than
                    # through rows meanwhile, which also slow the helper's start down
                    self._answered.wait(timeout=0.01)
                    continue
                # every helper has DEPTH pages to read (a few milliseconds each)
                if not self._answered.wait(timeout=_WAIT):
                    return None
        return self.answer(asked)

    def ask(self, sql: str, rows: int, remaining: int) -> Asked | None:
        """``page``'s request without its wait: sent to a ready helper with room, whose
        ``answer`` then gives the page, else None (``page`` waits for room, or the page
        is read as rows). The pipe takes a request at once and no helper starts here, so
        the event loop can ask: pages asked there reach the helpers in the order asked."""
        with self._answered:
            return self._ask(sql, rows, remaining, start=False)

    def _ask(self, sql: str, rows: int, remaining: int, *, start: bool) -> Asked | None:
        """(Under the lock.) Send ``sql`` to the ready helper with the fewest pages asked,
        if it has fewer than ``DEPTH``; ``start``: first start another helper if those
        running (or starting) have no room and ``remaining`` rows make it worth it."""
        if self._closed:
            return None
        self._poll_starting()
        # pages the helpers could take now (one starting counts as ready)
        room = sum(DEPTH - h.load for h in self._ready) + DEPTH * len(self._starting)
        if (
            start
            and room <= 0
            and remaining >= SPAWN_AT
            and len(self._starting) + len(self._ready) < HELPERS
            and time.monotonic() >= self._retry_at
        ):
            self._start()
        if not self._ready:
            return None
        helper = min(self._ready, key=lambda h: h.load)
        if helper.load >= DEPTH:
            return None
        try:
            ticket = helper.send(sql, rows)
        except HelperError as exc:
            self._drop(helper, exc)
            ticket = -1
        helper.load += 1
        return Asked(helper, ticket)

    def answer(self, asked: Asked) -> pa.Table | None:
        """The page ``ask`` (or ``page``) asked for, once the helper has read it (blocks);
        None if it could not (the page is read as rows)."""
        helper, ticket = asked
        try:
            if ticket < 0:
                raise HelperError("the helper process is gone")
            table = helper.receive(ticket)
        except HelperError as exc:  # this page goes through rows
            with self._answered:
                helper.load -= 1
                self._drop(helper, exc)
                gone = helper.load == 0
            if gone:
                helper.wait()
            return None
        with self._answered:
            helper.load -= 1
            self._answered.notify()
            done = self._closed and helper.load == 0
        if done:
            helper.close()
        return table

    def _drop(self, helper: Helper, exc: HelperError) -> None:
        """(Under the lock.) A helper that failed: its pages go through rows, and no new
        helper starts for ``RETRY_AFTER`` seconds."""
        if helper in self._ready:
            log.debug("a helper could not read a page as Arrow: %s", exc)
            self._ready.remove(helper)
            self._retry_at = time.monotonic() + RETRY_AFTER
            helper.close(wait=False)
        self._answered.notify_all()

    def warm(self) -> None:
        """Start the helpers now (a long read is coming), whatever the rows left."""
        with self._lock:
            while not self._closed and len(self._starting) + len(self._ready) < HELPERS:
                self._start()
                if time.monotonic() < self._retry_at:
                    break

    def ready(self) -> int:
        """How many helpers are ready and idle."""
        with self._lock:
            self._poll_starting()
            return sum(1 for h in self._ready if h.load == 0)

    def _start(self) -> None:
        try:
            self._starting.append(Helper(self.kind, self.target, self.busy_ms))
        except OSError as exc:  # no process could start (limits, a missing interpreter)
            log.warning("Arrow reads go through rows for %s s: %s", RETRY_AFTER, exc)
            self._retry_at = time.monotonic() + RETRY_AFTER

    def _poll_starting(self) -> None:
        for helper in list(self._starting):
            try:
                ready = helper.poll()
            except HelperError as exc:
                self._failed_start(helper, str(exc))
                continue
            if ready:
                self._starting.remove(helper)
                self._ready.append(helper)
            elif time.monotonic() - helper.started > _START_LIMIT:
                helper.proc.kill()
                self._failed_start(helper, f"a helper did not start within {_START_LIMIT} s")

    def _failed_start(self, helper: Helper, why: str) -> None:
        """(Under the lock.) A starting helper that died or hangs: dropped, and reads go
        through rows for ``RETRY_AFTER`` seconds."""
        log.warning("Arrow reads go through rows for %s s: %s", RETRY_AFTER, why)
        self._starting.remove(helper)
        helper.close()
        self._retry_at = time.monotonic() + RETRY_AFTER

    def close(self) -> None:
        """Stop the helpers (one with pages asked stops when they are answered)."""
        with self._answered:
            self._closed = True
            helpers = [h for h in self._ready if h.load == 0] + self._starting
            self._ready, self._starting = [h for h in self._ready if h.load], []
            self._answered.notify_all()  # pages waiting for a helper: read as rows
        for helper in helpers:  # all told first: they exit side by side
            helper.close(wait=False)
        for helper in helpers:
            helper.wait()
