"""``reventless serve`` over TLS, with a private CA made here: clients that trust the CA
get through (JSON endpoints, SSE, hashed bearer tokens), others fail the handshake, plain
HTTP to the TLS port gets no answer; with ``--ssl-cert-reqs required`` a client needs a
certificate the CA signed (mutual TLS). A certificate or key that cannot be used stops
``serve`` with one line and exit 2 before anything starts."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import reventless as rv
from examples.search_index.sse import read_events
from reventless.cli import main
from reventless.errors import ReventlessError
from reventless.gateway import TlsOptions, create_app, hash_token, serve
from tests.cli.process import command, env, reventless, user_error
from tests.gateway import conftest
from tests.gateway.conftest import auth
from tests.services import free_port
from tests.subscribe.conftest import order_rows, orders_app

TOKEN = "acme-tls-9Vb2Qx7Rm4Lp1Zs8Kt3N"
PASSWORD = "key-password-1"


# -- a private CA -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    """PEM files of a private CA, a server certificate it signed (127.0.0.1, localhost), a
    client certificate it signed, and a rogue CA's client certificate."""

    ca: Path
    cert: Path
    key: Path
    encrypted_key: Path  # the server key, encrypted with PASSWORD
    other_key: Path  # a key of no certificate here
    client_cert: Path
    client_key: Path
    rogue_ca: Path
    rogue_cert: Path
    rogue_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None = None) -> Path:
    crypt: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password.encode())
    )
    fmt = serialization.PrivateFormat.PKCS8
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, crypt))
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


CA_USAGE = x509.KeyUsage(
    digital_signature=False, content_commitment=False, key_encipherment=False,
    data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
    encipher_only=False, decipher_only=False,
)  # fmt: skip


class _Ca:
    def __init__(self, cn: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(cn)
        self.cert = (
            self._builder(self.name, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(CA_USAGE, critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def _builder(
        self, subject: x509.Name, public: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        )

    def issue(
        self, cn: str, *, server: bool
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            self._builder(_name(cn), key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        if server:
            names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def make_pki(d: Path) -> Pki:
    ca, rogue = _Ca("reventless test CA"), _Ca("rogue test CA")
    cert, key = ca.issue("127.0.0.1", server=True)
    client_cert, client_key = ca.issue("worker-1", server=False)
    rogue_cert, rogue_key = rogue.issue("intruder", server=False)
    return Pki(
        ca=_write_cert(d / "ca.pem", ca.cert),
        cert=_write_cert(d / "server.pem", cert),
        key=_write_key(d / "server.key", key),
        encrypted_key=_write_key(d / "server-encrypted.key", key, PASSWORD),
        other_key=_write_key(d / "other.key", ec.generate_private_key(ec.SECP256R1())),
        client_cert=_write_cert(d / "client.pem", client_cert),
        client_key=_write_key(d / "client.key", client_key),
        rogue_ca=_write_cert(d / "rogue-ca.pem", rogue.cert),
        rogue_cert=_write_cert(d / "rogue.pem", rogue_cert),
        rogue_key=_write_key(d / "rogue.key", rogue_key),
    )


def trusting(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """A client context that trusts ``ca`` only (and shows ``cert`` if given)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- reventless serve with TLS ------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    base: str  # https://127.0.0.1:<port>
    store: str
    log: Path  # the process's stderr


def start_serve(d: Path, *tls_args: str) -> Iterator[Served]:
    """``reventless serve`` with TLS on a free port, a store holding 3 acme orders and a
    tokens file holding only TOKEN's hash; stopped when the generator closes."""
    store = f"sqlite:///{d / 'store.db'}"
    app, topic = orders_app(store)

    async def fill() -> None:
        async with app:
            await topic.publish(order_rows(3), meta=rv.Metadata(tenant="acme"))

    asyncio.run(fill())
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps({hash_token(TOKEN): "acme"}))
    port = free_port()
    log = d / "serve.log"
    args = ["serve", "--store", store, "--tokens-file", str(tokens), "--port", str(port)]
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            command(*args, *tls_args), env=env(), stdout=subprocess.DEVNULL, stderr=err
        )
    served = Served(f"https://127.0.0.1:{port}", store, log)
    try:
        _wait_listening(proc, port, log)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the port accepts connections (nothing about TLS is assumed here)."""
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"reventless serve exited {proc.returncode}: {log.read_text()}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"reventless serve did not listen: {log.read_text()}")


@pytest.fixture(scope="module")
def served(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from start_serve(
        tmp_path_factory.mktemp("tls"),
        "--ssl-certfile",
        str(pki.cert),
        "--ssl-keyfile",
        str(pki.key),
    )


@pytest.fixture(scope="module")
def mutual(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Mutual TLS, and an encrypted key opened with a password file."""
    d = tmp_path_factory.mktemp("mtls")
    (d / "password.txt").write_text(PASSWORD + "\n")
    yield from start_serve(
        d,
        "--ssl-certfile", str(pki.cert),
        "--ssl-keyfile", str(pki.encrypted_key),
        "--ssl-keyfile-password-file", str(d / "password.txt"),
        "--ssl-ca-certs", str(pki.ca),
        "--ssl-cert-reqs", "required",
    )  # fmt: skip


# -- tests --------------------------------------------------------------------------------


async def test_a_client_trusting_the_ca_gets_through(pki: Pki, served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base, verify=trusting(pki.ca)) as http:
        assert (await http.get("/health")).json() == {"ok": True}
        created = await http.post("/subscriptions", json={"topic": "orders"}, headers=auth(TOKEN))
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        page = (await http.get(f"/subscriptions/{sid}/events", headers=auth(TOKEN))).json()
        assert [e["data"]["qty"] for e in page["events"]] == [0, 1, 2]
        for wrong in (TOKEN + "x", hash_token(TOKEN), "acme-token-1"):
            r = await http.get(f"/subscriptions/{sid}", headers=auth(wrong))
            assert r.status_code == 401, r.text
            assert r.json()["error"] == "unauthorized"


async def test_sse_over_tls(pki: Pki, served: Served) -> None:
    """The stream sends the stored events, then one committed while it is open."""
    async with httpx.AsyncClient(base_url=served.base, verify=trusting(pki.ca), timeout=15) as http:
        created = await http.post(
            "/subscriptions", json={"topic": "orders", "from": 2}, headers=auth(TOKEN)
        )
        sid = created.json()["id"]
        got: list[int] = []
        async with http.stream("GET", f"/subscriptions/{sid}/stream", headers=auth(TOKEN)) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for frame in read_events(r):
                assert frame.event == "event"
                got.append(frame.json()["data"]["qty"])
                if len(got) == 2:  # the stored ones: publish one more while streaming
                    app, topic = orders_app(served.store)
                    async with app:
                        await topic.publish(order_rows(1, start=3), meta=rv.Metadata(tenant="acme"))
                if len(got) == 3:
                    break
        assert got == [1, 2, 3]


@pytest.mark.parametrize("trust", ["system", "rogue"])
async def test_a_client_not_trusting_the_ca_fails(pki: Pki, served: Served, trust: str) -> None:
    verify: ssl.SSLContext | bool = True if trust == "system" else trusting(pki.rogue_ca)
    async with httpx.AsyncClient(base_url=served.base, verify=verify) as http:
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await http.get("/health")


async def test_plain_http_to_the_tls_port_gets_no_answer(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.base.replace("https:", "http:")) as http:
        with pytest.raises(httpx.TransportError):
            await http.get("/health", headers=auth(TOKEN))
    async with httpx.AsyncClient(base_url=served.base, verify=False) as http:
        assert (await http.get("/health")).status_code == 200  # the server is still up


async def test_mutual_tls(pki: Pki, mutual: Served) -> None:
    verify = trusting(pki.ca, pki.client_cert, pki.client_key)
    async with httpx.AsyncClient(base_url=mutual.base, verify=verify) as http:
        assert (await http.get("/subscriptions", headers=auth(TOKEN))).status_code == 200
        assert (await http.get("/subscriptions", headers=auth("wrong-token-1"))).status_code == 401
    for verify in (trusting(pki.ca), trusting(pki.ca, pki.rogue_cert, pki.rogue_key)):
        async with httpx.AsyncClient(base_url=mutual.base, verify=verify) as http:
            with pytest.raises(httpx.TransportError):  # TLS 1.3: at the first read
                await http.get("/subscriptions", headers=auth(TOKEN))


async def test_tls_in_python(pki: Pki, tmp_path: Path) -> None:
    """``TlsOptions`` as uvicorn options serve HTTPS; ``serve`` checks them first."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    async with app:
        await topic.publish(order_rows(1), meta=rv.Metadata(tenant="acme"))
    tls = TlsOptions(certfile=pki.cert, keyfile=pki.encrypted_key, keyfile_password=PASSWORD)
    assert PASSWORD not in repr(tls)
    async with (
        conftest.serve(url, tls=tls) as base,
        httpx.AsyncClient(base_url=base, verify=trusting(pki.ca)) as http,
    ):
        assert base.startswith("https://")
        assert (await http.get("/topics", headers=auth("acme-token-1"))).status_code == 200
    gateway = create_app(url, tokens={TOKEN: "acme"})
    bad = TlsOptions(certfile=pki.cert, keyfile=pki.other_key)
    with pytest.raises(ReventlessError, match="does not match the certificate"):
        await serve(gateway, port=free_port(), tls=bad)


def _bad_cases(pki: Pki, d: Path) -> dict[str, tuple[list[str], str]]:
    (d / "junk.pem").write_text("not a certificate\n")
    (d / "wrong-password.txt").write_text("not-the-password\n")
    cert, key = str(pki.cert), str(pki.key)
    return {
        "missing-cert": (["--ssl-certfile", str(d / "none.pem"), "--ssl-keyfile", key],
                         f"TLS certificate {d / 'none.pem'}: No such file or directory"),
        "missing-key": (["--ssl-certfile", cert, "--ssl-keyfile", str(d / "none.key")],
                        f"TLS key {d / 'none.key'}: No such file or directory"),
        "unreadable-cert": (["--ssl-certfile", str(d), "--ssl-keyfile", key],
                            f"TLS certificate {d}: Is a directory"),
        "key-of-another-cert": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.other_key)],
                                f"TLS key {pki.other_key} does not match the certificate {cert}"),
        "junk-cert": (["--ssl-certfile", str(d / "junk.pem"), "--ssl-keyfile", key],
                      "no PEM certificate in it"),
        "junk-key": (["--ssl-certfile", cert, "--ssl-keyfile", str(d / "junk.pem")],
                     "no PEM private key in it"),
        "cert-without-key": (["--ssl-certfile", cert], f"TLS key {cert}: no PEM private key"),
        "key-is-a-cert": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.ca)],
                          "no PEM private key in it"),
        "encrypted-no-password": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.encrypted_key)],
                                  "is encrypted: give its password"),
        "wrong-password": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.encrypted_key),
                            "--ssl-keyfile-password-file", str(d / "wrong-password.txt")],
                           "wrong password"),
        "wrong-password-arg": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.encrypted_key),
                                "--ssl-keyfile-password", "nope"], "wrong password"),
        "missing-password-file": (["--ssl-certfile", cert, "--ssl-keyfile", str(pki.encrypted_key),
                                   "--ssl-keyfile-password-file", str(d / "none.txt")],
                                  "--ssl-keyfile-password-file"),
        "key-without-cert": (["--ssl-keyfile", key], "--ssl-keyfile needs --ssl-certfile"),
        "ca-without-cert": (["--ssl-ca-certs", str(pki.ca)], "--ssl-ca-certs needs --ssl-certfile"),
        "reqs-without-ca": (["--ssl-certfile", cert, "--ssl-keyfile", key,
                             "--ssl-cert-reqs", "required"], "give ca_certs (--ssl-ca-certs)"),
        "ca-without-reqs": (["--ssl-certfile", cert, "--ssl-keyfile", key,
                             "--ssl-ca-certs", str(pki.ca)], "cert_reqs optional or required"),
        "junk-ca": (["--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-ca-certs",
                     str(d / "junk.pem"), "--ssl-cert-reqs", "2"],
                    f"TLS CA certificates {d / 'junk.pem'}: no PEM certificate in it"),
        "bad-reqs": (["--ssl-certfile", cert, "--ssl-cert-reqs", "always"], "--ssl-cert-reqs"),
        "two-passwords": (["--ssl-certfile", cert, "--ssl-keyfile-password", "a",
                           "--ssl-keyfile-password-file", "b"], "does not go with"),
    }  # fmt: skip


BAD = [
    "missing-cert", "missing-key", "unreadable-cert", "key-of-another-cert", "junk-cert",
    "junk-key", "cert-without-key", "key-is-a-cert", "encrypted-no-password", "wrong-password",
    "wrong-password-arg", "missing-password-file", "key-without-cert", "ca-without-cert",
    "reqs-without-ca", "ca-without-reqs", "junk-ca", "bad-reqs", "two-passwords",
]  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_unusable_tls_input_is_one_line_and_exit_2(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    args, needle = _bad_cases(pki, tmp_path)[case]
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: "acme"}))
    store = f"sqlite:///{tmp_path / 'never-created.db'}"
    code: int | str | None
    try:
        code = main(["serve", "--store", store, "--tokens-file", str(tokens), *args])
    except SystemExit as exc:  # argparse's refusals exit from the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err and PASSWORD not in err and "nope" not in err
    assert not (tmp_path / "never-created.db").exists()  # refused before the store opened


def test_the_serve_script_refuses_a_mismatched_key(pki: Pki, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: "acme"}))
    args = ["--ssl-certfile", str(pki.cert), "--ssl-keyfile", str(pki.other_key)]
    result = reventless("serve", "--tokens-file", str(tokens), *args, cwd=tmp_path)
    user_error(result, f"reventless: error: TLS key {pki.other_key} does not match the certificate")
    assert os.listdir(tmp_path) == ["tokens.json"]
