"""JetStream behind authentication and TLS: user/password and token in the URL's
userinfo, a CA bundle to verify the server (``nats+tls://...?tls_ca=``); wrong secrets
fail with ``BrokerError`` and no message or repr shows them.

Each test starts its own nats-server with the flags it needs; the certificates are made
here (a throwaway CA and a server certificate for 127.0.0.1).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import reventless as rv
from reventless.urls import redact_url
from tests.model import Counter, Increment, totals
from tests.nats_server import NatsServer, nats_binary

pytestmark = pytest.mark.nats

SECRET = "s3cr:t@pw"  # characters a URL must percent-encode
QUOTED = "s3cr%3At%40pw"


def started(tmp_path: Path, *flags: str) -> Iterator[NatsServer]:
    server = NatsServer(nats_binary(), tmp_path / f"nats-{uuid.uuid4().hex[:6]}", extra=flags)
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(f"nats-server with {flags} did not start: {exc}")
    yield server
    server.stop()


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from started(tmp_path, "--user", "app", "--pass", SECRET)


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from started(tmp_path, "--auth", "t0ken-" + SECRET.replace(":", "").replace("@", ""))


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A CA certificate and a server certificate + key for 127.0.0.1 signed by it (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: x509.Name | None,
        signer: ec.EllipticCurvePrivateKey,
        ca: bool,
    ) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        b = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return b.sign(signer, hashes.SHA256())

    ca_key, srv_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = cert("reventless test CA", ca_key, None, ca_key, ca=True)
    srv = cert("127.0.0.1", srv_key, ca.subject, ca_key, ca=False)
    out = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "server.pem",
        "key": tmp_path / "server.key",
    }
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(
        srv_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return out


@pytest.fixture
def tls_server(tmp_path: Path, tls_files: dict[str, Path]) -> Iterator[NatsServer]:
    yield from started(
        tmp_path,
        "--tls",
        "--tlscert",
        str(tls_files["cert"]),
        "--tlskey",
        str(tls_files["key"]),
        "--user",
        "app",
        "--pass",
        SECRET,
    )


async def round_trip(tmp_path: Path, url: str) -> None:
    """Commands -> store -> relay -> JetStream -> read model, with the store poll far out
    (so the rows arrive through the server)."""
    options = rv.AppOptions(collector=rv.CollectorOptions(poll_interval=60, grace=60))
    app = rv.App(store=f"sqlite:///{tmp_path / 'store.db'}", broker=url, options=options)
    log = app.event_log(Counter)
    view = app.collect(totals)
    async with app:
        for i in range(30):
            await log.execute(f"c-{i % 3}", Increment(by=1))
        await app.settle(timeout=30)
        assert {r.id: r.value for r in await view.all()} == {"c-0": 10, "c-1": 10, "c-2": 10}


def prefixed(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}prefix=t{uuid.uuid4().hex[:8]}"


async def test_user_and_password_from_the_url(tmp_path: Path, password_server: NatsServer) -> None:
    url = prefixed(f"nats://app:{QUOTED}@127.0.0.1:{password_server.port}")
    await round_trip(tmp_path, url)


async def test_a_wrong_password_fails_without_showing_it(
    tmp_path: Path, password_server: NatsServer
) -> None:
    url = prefixed(f"nats://app:wrong-{QUOTED}@127.0.0.1:{password_server.port}?connect_retries=1")
    app = rv.App(store="sqlite://", broker=url)
    app.event_log(Counter)
    with pytest.raises(rv.BrokerError) as caught:
        await app.start()
    await app.stop()
    text = str(caught.value) + repr(app.broker.options)  # type: ignore[attr-defined]
    assert "wrong" not in text and QUOTED not in text and SECRET not in text
    assert "app:***" in redact_url(url) and QUOTED not in redact_url(url)


async def test_a_token_from_the_url(tmp_path: Path, token_server: NatsServer) -> None:
    token = "t0ken-" + SECRET.replace(":", "").replace("@", "")
    await round_trip(tmp_path, prefixed(f"nats://{token}@127.0.0.1:{token_server.port}"))


async def test_tls_verified_with_the_given_ca(
    tmp_path: Path, tls_server: NatsServer, tls_files: dict[str, Path]
) -> None:
    url = f"nats+tls://app:{QUOTED}@127.0.0.1:{tls_server.port}?tls_ca={tls_files['ca']}"
    await round_trip(tmp_path, prefixed(url))


async def test_tls_refuses_a_server_it_cannot_verify(
    tmp_path: Path, tls_server: NatsServer
) -> None:
    # no tls_ca: the system's CAs do not know the test CA
    url = prefixed(f"nats+tls://app:{QUOTED}@127.0.0.1:{tls_server.port}?connect_retries=1")
    from reventless_nats import JetStreamBroker

    broker = JetStreamBroker.from_url(url)
    with pytest.raises(rv.BrokerError, match=r"(?i)certificate"):
        await broker.connect()
    await broker.close()
