"""TLS for the gateway: uvicorn's ``ssl_*`` settings, checked before the server starts.

uvicorn reads the certificate and key when it starts serving, and a missing file, a key
for another certificate or an encrypted key without its password end in a traceback (or,
for the key, a password prompt on the terminal). ``TlsOptions.context`` builds the same
context first and says what is wrong in one line (``ReventlessError``), naming the file.
With ``ca_certs`` and ``cert_reqs`` ``CERT_REQUIRED`` the gateway asks clients for a
certificate signed by those CAs (mutual TLS), besides their bearer token.

Example::

    tls = TlsOptions(certfile="server.pem", keyfile="server.key")
    await serve(app, host="0.0.0.0", port=8443, tls=tls)
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from ..errors import ReventlessError

Path = str | os.PathLike[str]


class _NoPassword(Exception):
    """The key is encrypted and no password was given (raised inside OpenSSL's callback)."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """``certfile``: the server's PEM certificate chain (with its key when ``keyfile`` is
    None); ``keyfile``: its PEM private key; ``keyfile_password``: the key's password if it
    is encrypted; ``ca_certs``: PEM CA certificates that sign client certificates, with
    ``cert_reqs`` ``ssl.CERT_OPTIONAL`` or ``ssl.CERT_REQUIRED`` (``CERT_NONE``, the
    default: no client certificate asked)."""

    certfile: Path
    keyfile: Path | None = None
    keyfile_password: str | None = field(default=None, repr=False)
    ca_certs: Path | None = None
    cert_reqs: ssl.VerifyMode = ssl.CERT_NONE

    def context(self) -> ssl.SSLContext:
        """The server's SSL context, as uvicorn builds it (``ReventlessError``, one line
        naming the file, for a file that cannot be read or used)."""
        if self.cert_reqs != ssl.CERT_NONE and self.ca_certs is None:
            raise ReventlessError(
                "client certificates are verified against CA certificates: "
                "give ca_certs (--ssl-ca-certs)"
            )
        if self.cert_reqs == ssl.CERT_NONE and self.ca_certs is not None:
            raise ReventlessError(
                "CA certificates verify client certificates only when they are asked for: "
                "cert_reqs optional or required (--ssl-cert-reqs)"
            )
        files = {
            "certificate": self.certfile,
            "key": self.keyfile,
            "CA certificates": self.ca_certs,
        }
        for what, path in files.items():
            if path is not None:
                _readable(f"TLS {what}", path)
        _certificates("TLS certificate", self.certfile)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        key = os.fspath(self.keyfile if self.keyfile is not None else self.certfile)
        asked = False

        def password() -> str:
            nonlocal asked
            asked = True
            if self.keyfile_password is None:
                raise _NoPassword
            return self.keyfile_password

        try:
            ctx.load_cert_chain(self.certfile, self.keyfile, password)
        except _NoPassword:
            raise ReventlessError(f"TLS key {key} is encrypted: give its password") from None
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                msg = f"TLS key {key} does not match the certificate {os.fspath(self.certfile)}"
            elif asked:
                msg = f"TLS key {key}: wrong password"
            else:
                msg = f"TLS key {key}: no PEM private key in it"
            raise ReventlessError(msg) from None
        ctx.verify_mode = self.cert_reqs
        if self.ca_certs is not None:
            _certificates("TLS CA certificates", self.ca_certs, ctx)
        return ctx

    def uvicorn_config(self) -> dict[str, Any]:
        """These options as ``uvicorn.Config`` keyword arguments."""
        return {
            "ssl_certfile": self.certfile,
            "ssl_keyfile": self.keyfile,
            "ssl_keyfile_password": self.keyfile_password,
            "ssl_ca_certs": self.ca_certs,
            "ssl_cert_reqs": int(self.cert_reqs),
        }


def _readable(what: str, path: Path) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ReventlessError(f"{what} {os.fspath(path)}: {exc.strerror}") from None


def _certificates(what: str, path: Path, ctx: ssl.SSLContext | None = None) -> None:
    """Load ``path``'s certificates as trust anchors into ``ctx`` (a throwaway context:
    only check that the file holds a PEM certificate)."""
    try:
        (ctx or ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)).load_verify_locations(path)
    except ssl.SSLError:
        raise ReventlessError(f"{what} {os.fspath(path)}: no PEM certificate in it") from None
