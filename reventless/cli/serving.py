"""``reventless serve`` (the HTTP/SSE gateway, extra ``serve``) and ``reventless token
hash`` (the lines of its tokens file). Secrets are read from files or stdin, never taken
as arguments where ``ps`` and the shell history would keep them.

Example::

    reventless token hash --new > token.txt
    reventless serve --store sqlite:///shop.db --tokens-file tokens.json --port 8000
"""

from __future__ import annotations

import importlib.util
import json
import ssl
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ReventlessError
from .log import DEFAULT_STORE, Store
from .params import PORT, cert_reqs, seconds
from .run import UsageError, fail, run

if TYPE_CHECKING:
    from ..gateway import TlsOptions


def _tokens(path: str) -> dict[str, str | None]:
    try:
        with open(path, encoding="utf-8") as f:
            tokens = json.load(f)
    except OSError as exc:
        raise UsageError(f"--tokens-file {path}: {exc.strerror}") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"--tokens-file {path}: not JSON ({exc})") from exc
    if not isinstance(tokens, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in tokens.items()
    ):
        raise ReventlessError(f"{path}: expected a JSON object {{token: tenant or null}}")
    return tokens


def _bearer_tokens(path: str) -> dict[str, str | None]:
    """The tokens file, its plain tokens and hashes checked (never echoed in an error)."""
    from ..gateway import BearerTokens

    tokens = _tokens(path)
    try:
        BearerTokens(tokens)
    except ReventlessError as exc:
        raise UsageError(f"--tokens-file {path}: {exc}") from None
    return tokens


def read_secret(flag: str, path: str) -> str:
    """A secret kept in a file (not on the command line, where ``ps`` shows it): the
    file's text without its line end."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().rstrip("\r\n")
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise UsageError(f"{flag} {path}: not UTF-8 text ({exc})") from exc
    if not text:
        raise UsageError(f"{flag} {path}: the file is empty")
    return text


@dataclass(frozen=True, slots=True)
class TlsArgs:
    """``serve``'s TLS options as given."""

    certfile: str | None
    keyfile: str | None
    password: str | None
    password_file: str | None
    ca_certs: str | None
    cert_reqs: ssl.VerifyMode | None


def _tls(a: TlsArgs) -> TlsOptions | None:
    """The TLS options ``serve`` was given, their files checked (None: plain HTTP)."""
    from ..gateway import TlsOptions

    if a.password is not None and a.password_file is not None:
        raise UsageError("--ssl-keyfile-password does not go with --ssl-keyfile-password-file")
    if a.certfile is None:
        given = [
            flag
            for flag, value in (
                ("--ssl-keyfile", a.keyfile),
                ("--ssl-keyfile-password", a.password),
                ("--ssl-keyfile-password-file", a.password_file),
                ("--ssl-ca-certs", a.ca_certs),
                ("--ssl-cert-reqs", a.cert_reqs),
            )
            if value is not None
        ]
        if given:
            raise UsageError(f"{given[0]} needs --ssl-certfile (the server's certificate)")
        return None
    password = a.password
    if a.password_file is not None:
        password = read_secret("--ssl-keyfile-password-file", a.password_file)
    tls = TlsOptions(
        certfile=a.certfile,
        keyfile=a.keyfile,
        keyfile_password=password,
        ca_certs=a.ca_certs,
        cert_reqs=ssl.CERT_NONE if a.cert_reqs is None else a.cert_reqs,
    )
    tls.context()  # a file that cannot be used fails now, in one line
    return tls


def serve(
    tokens_file: Annotated[
        str,
        typer.Option(
            "--tokens-file",
            help="JSON {token or sha256$<hex>: tenant or null} (reventless token hash)",
        ),
    ],
    store: Store = DEFAULT_STORE,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", parser=PORT)] = 8000,
    retention_interval: Annotated[
        float | None, typer.Option("--retention-interval", parser=seconds, help="seconds")
    ] = None,
    stream_token_key_file: Annotated[
        str | None,
        typer.Option(
            "--stream-token-key-file",
            help="file with the key stream tokens are signed with (>= 16 bytes); "
            "default: derived from the plain tokens, random if all are hashes",
        ),
    ] = None,
    ssl_certfile: Annotated[
        str | None, typer.Option("--ssl-certfile", help="PEM certificate chain: serve HTTPS")
    ] = None,
    ssl_keyfile: Annotated[
        str | None, typer.Option("--ssl-keyfile", help="PEM private key (default: in certfile)")
    ] = None,
    ssl_keyfile_password: Annotated[
        str | None, typer.Option("--ssl-keyfile-password", help="of an encrypted key (ps shows it)")
    ] = None,
    ssl_keyfile_password_file: Annotated[
        str | None, typer.Option("--ssl-keyfile-password-file", help="file with the password")
    ] = None,
    ssl_ca_certs: Annotated[
        str | None, typer.Option("--ssl-ca-certs", help="PEM CA certificates of client certs")
    ] = None,
    ssl_cert_reqs: Annotated[
        ssl.VerifyMode | None,
        typer.Option(
            "--ssl-cert-reqs",
            parser=cert_reqs,
            help="client certificate: none (default), optional or required (mutual TLS)",
        ),
    ] = None,
) -> None:
    """Run the HTTP/SSE subscription gateway (extra 'serve') until Ctrl-C or SIGTERM."""
    tls = TlsArgs(
        ssl_certfile,
        ssl_keyfile,
        ssl_keyfile_password,
        ssl_keyfile_password_file,
        ssl_ca_certs,
        ssl_cert_reqs,
    )
    run(_serve(tokens_file, store, host, port, retention_interval, stream_token_key_file, tls))


async def _serve(
    tokens_file: str,
    store: str,
    host: str,
    port: int,
    retention_interval: float | None,
    key_file: str | None,
    tls_args: TlsArgs,
) -> None:
    if importlib.util.find_spec("uvicorn") is None:
        raise UsageError("reventless serve needs the extra: pip install 'reventless[serve]'")
    from ..gateway import GatewayOptions, create_app, serve

    tokens = _bearer_tokens(tokens_file)
    tls = _tls(tls_args)
    key = None
    if key_file is not None:
        key = read_secret("--stream-token-key-file", key_file).encode()
        if len(key) < 16:
            raise UsageError(f"--stream-token-key-file {key_file}: a key has at least 16 bytes")
    await _check_store(store)  # a bad URL fails here, not inside uvicorn's start-up
    from .. import telemetry

    # OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER, then /metrics counts from the start
    # (both log once and go on when the extras are missing or a setting is unknown)
    telemetry.setup_from_env()
    telemetry.enable_prometheus()
    app = create_app(
        store,
        tokens=tokens,
        options=GatewayOptions(retention_interval=retention_interval, stream_token_key=key),
    )
    await serve(app, host=host, port=port, tls=tls)


async def _check_store(url: str) -> None:
    """Open and close the store at ``url`` (``StoreError`` if it cannot be reached)."""
    from ..store import Database

    db = Database(url)
    await db.open()
    await db.close()


def token_hash(
    new: Annotated[
        bool, typer.Option("--new", help="generate a random token; print it and its hash")
    ] = False,
    argument: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
) -> None:
    """Print the sha256$<hex> line of a token read from stdin (or of a new one).

    The token on stdin (a terminal: asked for without echo), or with --new a new random
    token and its hash. A token is never taken as an argument: the shell history and ps
    would keep it."""
    if argument:  # refused without echoing it: the token may be in it
        fail(
            "a token is never taken as an argument (the shell history and ps keep it): "
            "pipe it on stdin, or use --new"
        )
    run(_token_hash(new))


async def _token_hash(new: bool) -> None:
    try:
        from ..gateway import hash_token, new_token
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if new:
        token = new_token()
        print(f"token: {token}")
        print(f"hash:  {hash_token(token)}")
        return
    if sys.stdin.isatty():
        import getpass

        text = getpass.getpass("token (not echoed): ")
    else:
        text = sys.stdin.read()
    lines = text.strip().splitlines()
    if len(lines) != 1:
        got = "nothing" if not lines else f"{len(lines)} lines"
        raise UsageError(f"expected one token on stdin (or --new for a new one), got {got}")
    print(hash_token(lines[0].strip()))
