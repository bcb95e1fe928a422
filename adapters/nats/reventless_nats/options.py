"""``NatsOptions``: the settings of a ``nats://`` broker URL, and the name mapping.

Example::

    NatsOptions.from_url("nats://127.0.0.1:4222?partitions=16&max_deliver=5")
"""

from __future__ import annotations

import re
import ssl
import zlib
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from reventless.errors import BrokerError
from reventless.urls import redact_url

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
_PREFIX = re.compile(r"^[A-Za-z0-9_]+$")
_CONVERT = {"int": int, "float": float, "str": str}
#: Fields that come from the URL's scheme and userinfo, not from its query.
_NOT_QUERY = ("servers", "user", "password", "token", "tls")


def token(name: str) -> str:
    """``name`` as one NATS name/subject token: ``[A-Za-z0-9_]`` only.

    A name that had to change gets a crc32 suffix, so ``a.b`` and ``a_b`` stay apart.
    """
    clean = _UNSAFE.sub("_", name)
    if clean == name and name:
        return name
    return f"{clean}_{zlib.crc32(name.encode()):08x}"


#: Options that turn TLS on without the ``nats+tls://`` scheme.
_TLS_FILES = ("tls_ca", "tls_cert", "tls_key", "tls_hostname")


@dataclass(frozen=True, slots=True)
class NatsOptions:
    """Every knob of the adapter; each one (except ``servers``) is a URL query option.

    Stream settings (``storage``, ``replicas``, ``dedup_window``, ``max_age``) apply when a
    stream is created; an existing stream keeps its settings.
    """

    #: ``nats://host:port`` of each seed server (``nats://h1:4222,h2:4222`` in a URL).
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    #: First subject token and stream-name prefix: ``rv`` -> ``rv.<topic>.<n>``, ``RV_<topic>``.
    prefix: str = "rv"
    #: Subjects per topic: a message goes to ``key % partitions`` (a numeric key: the
    #: topic partition the relay sends) or ``crc32(key) % partitions``.
    partitions: int = 16
    #: Deliveries of a message before the consumer gives up on it (-1: never).
    max_deliver: int = 5
    #: Messages per fetch (one handler call gets at most this many).
    batch: int = 100
    #: Publish acks in flight at once.
    max_pending: int = 256
    #: Seconds the server remembers a ``Nats-Msg-Id`` to drop duplicate publishes.
    dedup_window: float = 120.0
    #: Seconds a stream keeps messages (0: forever). The store is the record, not the stream.
    max_age: float = 7 * 86400.0
    #: ``file`` or ``memory`` stream storage.
    storage: str = "file"
    #: Stream replicas (clustered servers).
    replicas: int = 1
    #: Seconds before an unacked delivery is redelivered (kept alive while a handler runs).
    ack_wait: float = 30.0
    #: Seconds an idle fetch waits for a message before asking again.
    fetch_wait: float = 1.0
    #: Seconds ``publish`` waits for the server's acks before raising ``BrokerError``.
    publish_timeout: float = 10.0
    #: Redelivery delay after the first failed delivery (doubles per delivery).
    backoff: float = 0.1
    #: Upper bound of the redelivery delay and of the fetch loop's error backoff.
    max_backoff: float = 5.0
    #: Seconds between reconnect attempts to one server.
    reconnect_wait: float = 0.5
    #: Reconnect attempts per server after a lost connection (-1: forever).
    max_reconnects: int = -1
    #: Attempts per server when connecting first (``connect`` then raises ``BrokerError``).
    connect_retries: int = 3
    #: Seconds per TCP connect attempt.
    connect_timeout: float = 2.0
    #: Seconds between the client's PINGs. With ``max_pings_out`` of them unanswered the
    #: connection is stale and replaced: a half-open connection or a silent network
    #: stops publishes and fetches for at most about ``(max_pings_out + 1) *
    #: ping_interval`` (nats-py's own default is 2 minutes).
    ping_interval: float = 20.0
    max_pings_out: int = 2
    #: Connection name (shown by the server's monitoring).
    name: str = "reventless"
    #: ``user:password`` or a ``token`` from the URL's userinfo (``nats://u:p@host``,
    #: ``nats://token@host``; percent-encoded). Kept out of ``servers``, logs and reprs.
    user: str = ""
    password: str = field(default="", repr=False)
    token: str = field(default="", repr=False)
    #: A NATS credentials file (user JWT + nkey seed), e.g. ``creds=/etc/nats/app.creds``.
    creds: str = ""
    #: TLS, on with the ``nats+tls://`` scheme or any ``tls_*`` option: a CA bundle to verify the
    #: server with (default: the system's), a client certificate and key (mutual TLS) and
    #: the server name to check when it differs from the host.
    tls: bool = False
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_hostname: str = ""

    @classmethod
    def from_url(cls, url: str) -> NatsOptions:
        """Parse ``nats://[user:pass@|token@]host:port[,host:port...][?option=value&...]``
        (``nats+tls://...`` for TLS)."""
        parts = urlsplit(url)
        if parts.scheme not in ("nats", "nats+tls"):
            raise BrokerError(f"not a nats:// or nats+tls:// URL: {redact_url(url)!r}")
        userinfo, _, hostlist = parts.netloc.rpartition("@")
        hosts = [h for h in (hostlist or "127.0.0.1:4222").split(",") if h]
        known = {f.name: f for f in fields(cls) if f.name not in _NOT_QUERY}
        values: dict[str, object] = {}
        for key, raw in parse_qsl(parts.query, keep_blank_values=True):
            f = known.get(key)
            if f is None:
                raise BrokerError(
                    f"unknown nats:// option {key!r} in {redact_url(url)!r} "
                    f"(known: {', '.join(known)})"
                )
            try:
                values[key] = _CONVERT[str(f.type)](raw)
            except ValueError:
                raise BrokerError(f"nats:// option {key}={raw!r} is not a {f.type}") from None
        if ":" in userinfo:
            user, _, password = userinfo.partition(":")
            values |= {"user": unquote(user), "password": unquote(password)}
        elif userinfo:
            values["token"] = unquote(userinfo)
        tls = parts.scheme == "nats+tls" or any(str(values.get(k, "")) for k in _TLS_FILES)
        scheme = "tls" if tls else "nats"
        opts = cls(servers=tuple(f"{scheme}://{h}" for h in hosts), tls=tls, **values)  # type: ignore[arg-type]
        opts.validate()
        return opts

    def connect_options(self) -> dict[str, Any]:
        """The authentication and TLS keywords of ``nats.connect`` for these options."""
        out: dict[str, Any] = {}
        if self.user:
            out |= {"user": self.user, "password": self.password}
        if self.token:
            out["token"] = self.token
        if self.creds:
            out["user_credentials"] = self.creds
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls_ca or None)
            if self.tls_cert:
                ctx.load_cert_chain(self.tls_cert, self.tls_key or None)
            out["tls"] = ctx
            if self.tls_hostname:
                out["tls_hostname"] = self.tls_hostname
        return out

    def validate(self) -> None:
        """Raise ``BrokerError`` for settings the server or the adapter cannot use."""
        problems = []
        if not self.servers:
            problems.append("no servers")
        if self.tls_key and not self.tls_cert:
            problems.append("tls_key needs tls_cert")
        if self.token and self.user:
            problems.append("give user:password or a token, not both")
        if not _PREFIX.match(self.prefix):
            problems.append(f"prefix {self.prefix!r} must be [A-Za-z0-9_]+")
        for name in ("partitions", "batch", "max_pending", "replicas"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1")
        if self.max_deliver == 0 or self.max_deliver < -1:
            problems.append("max_deliver must be >= 1 (or -1: unlimited)")
        for name in (
            "dedup_window",
            "ack_wait",
            "fetch_wait",
            "publish_timeout",
            "backoff",
            "ping_interval",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0")
        if self.max_pings_out < 1:
            problems.append("max_pings_out must be >= 1")
        if self.max_age < 0:
            problems.append("max_age must be >= 0 (0: keep forever)")
        if self.max_age and self.dedup_window > self.max_age:
            problems.append("dedup_window must not exceed max_age")
        if self.storage not in ("file", "memory"):
            problems.append(f"storage must be 'file' or 'memory', not {self.storage!r}")
        if self.connect_retries < 0:
            problems.append("connect_retries must be >= 0")
        if problems:
            raise BrokerError("bad nats:// options: " + "; ".join(problems))

    # -- the mapping ------------------------------------------------------------------------

    def stream_name(self, topic: str) -> str:
        """The stream holding ``topic``: ``RV_<topic>``."""
        return f"{self.prefix.upper()}_{token(topic)}"

    def partition(self, key: str) -> int:
        """The subject partition of a message key: a topic partition (a decimal key, as
        the relay sends) modulo ``partitions``, else ``crc32(key) % partitions``."""
        if key.isdigit():
            return int(key) % self.partitions
        return zlib.crc32(key.encode()) % self.partitions

    def subject(self, topic: str, key: str) -> str:
        """The subject a message of ``topic`` with ``key`` is published to."""
        return f"{self.prefix}.{token(topic)}.{self.partition(key)}"

    def subjects(self, topic: str, part: int | None = None) -> str:
        """All subjects of ``topic`` (the stream's subjects, a whole group's filter), or
        the one subject of subject partition ``part`` (a group member's filter)."""
        return f"{self.prefix}.{token(topic)}.{'>' if part is None else part}"

    def subject_parts(self, partitions: Collection[int] | None) -> list[int | None]:
        """The subject partitions a consumer of these topic partitions filters on, one
        durable consumer each; ``[None]`` (the whole topic) for all or none of them."""
        n = self.partitions
        parts = sorted({p % n for p in partitions}) if partitions is not None else []
        return [*parts] if 0 < len(parts) < n else [None]

    def durable_name(self, group: str, part: int | None = None) -> str:
        """The durable consumer of ``group`` on a stream (of its subject ``part``, for a
        member of a collector group that owns only some partitions)."""
        return token(group) if part is None else f"{token(group)}_p{part}"
