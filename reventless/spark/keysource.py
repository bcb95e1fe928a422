"""Where Spark executors find the data keys that open personal fields (``rv.Personal``).

Personal fields reach Spark sealed (Parquet segments and JDBC reads carry the stored
text). A job whose topics have personal columns ships a ``KeySource`` in its closure:
the store's URL and the master key, taken from the driver's keyring. An executor reads
the data keys it needs from ``rv_keys`` itself (``SyncSqlKeyStore``: read-only, a plain
synchronous connection) and opens the rows of each Arrow batch before decoding them,
so handlers see the same values as the live collector, and a forgotten subject's fields
read as ``rv.ERASED`` (never an error).

The master key travels with the job, so executors need no configuration, and a Spark
session started before the App works: on a real cluster, encrypt Spark's traffic and
spills (``spark.authenticate``, ``spark.network.crypto.enabled``,
``spark.io.encryption.enabled``), as the store's password in a JDBC read already asks.

Each job has its own id: an executor keeps one keyring per job (its keys cached for the
job, at most ``_JOBS`` jobs per Python worker), so a rebuild started after
``App.forget`` never opens the subject's fields with a key cached by an earlier job.

Example::

    keys = KeySource.of(store)                     # the driver, when a topic is personal
    rows = keys.keyring().open_rows(schema, rows)  # an executor, before decoding
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from ..store import Store
from ..store.keys import MasterKey
from ..store.keysync import SyncKeyring, SyncSqlKeyStore, key_location

__all__ = ["KeySource"]

#: Keyrings an executor process keeps (one per job, the oldest closed first).
_JOBS = 4
_rings: OrderedDict[str, SyncKeyring] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True, slots=True, repr=False)
class KeySource:
    """What an executor needs to open personal fields: the store's URL, the master key's
    text and the job's id (picklable; its repr shows neither secret)."""

    url: str
    master: str
    job: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __repr__(self) -> str:
        return f"KeySource(job={self.job})"

    @classmethod
    def of(cls, store: Store) -> KeySource:
        """The key source of ``store``'s keyring, for one job (``KeyringError`` without a
        master key, or with keys another process cannot read)."""
        url, master = key_location(store.keyring)
        return cls(url, master.text)

    def keyring(self) -> SyncKeyring:
        """This process's keyring of this job (made on first use)."""
        with _lock:
            ring = _rings.get(self.job)
            if ring is None:
                ring = SyncKeyring(SyncSqlKeyStore(self.url, MasterKey.parse(self.master)))
                _rings[self.job] = ring
                while len(_rings) > _JOBS:
                    _rings.popitem(last=False)[1].close()
            return ring

    def release(self) -> None:
        """Close this process's keyring of this job (the driver, once the job is done)."""
        with _lock:
            ring = _rings.pop(self.job, None)
        if ring is not None:
            ring.close()
