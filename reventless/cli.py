"""The ``reventless`` command: inspect a store without the application's code.

Example::

    reventless topics --store sqlite:///shop.db
    reventless tail Order --store sqlite:///shop.db --limit 5
    reventless tail Order --store sqlite:///shop.db --follow      # until Ctrl-C
    reventless export Order orders.parquet --store sqlite:///shop.db
    reventless dead-letters --store sqlite:///shop.db
    reventless redrive order_confirmations --app examples.shop.model:app --store sqlite:///shop.db
    reventless schedules --store sqlite:///shop.db                # pending and dead-lettered
    reventless redrive-schedules --store sqlite:///shop.db        # dead ones due again now
    reventless serve --store sqlite:///shop.db --tokens-file tokens.json --port 8000
    reventless serve --tokens-file tokens.json --ssl-certfile cert.pem --ssl-keyfile key.pem
    reventless token hash --new          # a new bearer token and its tokens-file hash
    reventless token hash < token.txt    # the hash of a token (stdin, never an argument)
    reventless rebuild examples.shop.stats:customer_orders --app examples.shop.model:app

``--app`` and the read model are ``module:attribute`` imported from the current
directory, as uvicorn and celery do. A user error (a bad argument, an unknown topic, a
store that cannot be opened, a module that does not import) prints one line to stderr
and exits 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import inspect
import json
import os
import signal
import ssl
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.parquet as pq

from .codec import META_NAMES
from .errors import ReventlessError
from .store import Database, StoreAdmin, open_admin

if TYPE_CHECKING:
    from .app import App
    from .gateway import TlsOptions
    from .store.schedules import Status

#: What ``--app`` names (the help and the README say it in these words).
FACTORY_RULE = (
    "--app module:attr names an App or a function returning one; "
    "with --store URL the function is called as attr(store=URL)"
)
#: Rows per read of ``tail --follow``.
FOLLOW_PAGE = 1000
#: Seconds ``tail --follow`` waits for a change signal before it reads again: another
#: process's commits signal on PostgreSQL (NOTIFY), not on SQLite.
FOLLOW_WAIT = 0.5
DIALECTS = ("sqlite", "postgresql")


class UsageError(ReventlessError):
    """A command-line argument the command cannot use (printed as one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _integer(least: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value: int | None = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(
                f"expected {what} (an integer >= {least}), got {text!r}"
            )
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value: float | None = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds (a number > 0), got {text!r}")
    return value


def _port(text: str) -> int:
    value = _integer(0, "a port")(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port (0-65535), got {text!r}")
    return value


#: ``--ssl-cert-reqs``: by name, or by number as uvicorn's option takes it.
CERT_REQS = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
    **{str(int(mode)): mode for mode in (ssl.CERT_NONE, ssl.CERT_OPTIONAL, ssl.CERT_REQUIRED)},
}


def _cert_reqs(text: str) -> ssl.VerifyMode:
    try:
        return CERT_REQS[text.lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"expected none, optional or required (or 0, 1, 2), got {text!r}"
        ) from None


def _dialects(text: str) -> tuple[str, ...]:
    names = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = [d for d in names if d not in DIALECTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(DIALECTS)}, got {text!r}"
        )
    return names


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or "error"


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


async def cmd_topics(a: argparse.Namespace) -> int:
    async with open_admin(a.store) as admin:
        overview = await admin.overview()
    _print_table(
        ["topic", "kind", "tenant", "partitions", "head", "table"],
        [(t.name, t.kind, t.tenant, t.partitions, t.head, t.table) for t in overview.topics],
    )
    print()
    # state: resnapshot_required when retention deleted events past a checkpoint
    _print_table(
        ["collector", "topic", "checkpoint", "lag", "state"],
        [
            (
                c.component,
                c.topic,
                c.checkpoint,
                c.lag,
                "resnapshot_required" if c.resnapshot_required else "ok",
            )
            for c in overview.collectors
        ],
    )
    return 0


async def cmd_tail(a: argparse.Namespace) -> int:
    if a.follow and a.limit is not None:
        raise UsageError("--limit does not go with --follow (which runs until interrupted)")
    async with open_admin(a.store) as admin:
        if a.follow:
            return await _follow(admin, a.topic, a.from_offset)
        schema, rows = await admin.tail(a.topic, a.from_offset or 1, a.limit or 20)
        rows = await admin.shown(schema, rows)
    _print_rows(schema, rows)
    return 0


def _print_rows(schema: pa.Schema, rows: Sequence[Sequence[Any]]) -> None:
    names = schema.names
    for row in (dict(zip(names, r, strict=True)) for r in rows):
        meta = {k: v for k, v in row.items() if k in META_NAMES and v is not None}
        data = {k: v for k, v in row.items() if k not in META_NAMES and v is not None}
        print(json.dumps({"offset": meta.pop("_offset"), **meta, "data": data}, default=str))
    sys.stdout.flush()


async def _follow(admin: StoreAdmin, topic: str, from_offset: int | None) -> int:
    """Print ``topic``'s events from ``from_offset`` (default: after the head) as they are
    committed, until SIGINT or SIGTERM (then return 0)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    assert task is not None
    stops = (signal.SIGINT, signal.SIGTERM)
    for sig in stops:
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C still interrupts
            loop.add_signal_handler(sig, task.cancel)
    try:
        if from_offset is None:
            heads = {t.name: t.head for t in (await admin.overview()).topics}
            from_offset = heads.get(topic, 0) + 1  # tail() names an unknown topic below
        offset = from_offset
        while True:
            seen = admin.changes  # before the read: a commit during it is not slept through
            schema, rows = await admin.tail(topic, offset, FOLLOW_PAGE)
            rows = await admin.shown(schema, rows)
            if rows:
                _print_rows(schema, rows)
                offset = int(rows[-1][schema.names.index("_offset")]) + 1
            if len(rows) < FOLLOW_PAGE:
                await admin.wait_for_change(FOLLOW_WAIT, seen)
    except asyncio.CancelledError:
        return 0
    finally:
        for sig in stops:
            with contextlib.suppress(NotImplementedError):
                loop.remove_signal_handler(sig)


async def cmd_export(a: argparse.Namespace) -> int:
    """Export through the typed Arrow schema stored with the topic, into a temporary file
    beside ``path`` that is renamed when complete (no half-written Parquet file)."""
    target = _export_target(a.path)
    partial = target.with_name(f".{target.name}.part")

    def write(schema: pa.Schema, pages: Iterator[list[tuple[Any, ...]]]) -> int:
        from .codec import TopicSchema

        ts = TopicSchema.from_arrow(a.topic, _fields_only(schema))
        count = 0
        with pq.ParquetWriter(partial, ts.arrow_schema) as writer:
            for rows in pages:
                batch = ts.to_arrow(rows)
                writer.write_batch(batch)
                count += batch.num_rows
                print(f"  exported {count} rows", file=sys.stderr, flush=True)
        return count

    try:
        async with open_admin(a.store) as admin:
            n = await admin.scan(a.topic, a.from_offset, write)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    print(f"wrote {n} rows to {a.path}")
    return 0


def _export_target(path: str) -> Path:
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{target} is a directory; give the Parquet file's path")
    if not target.parent.is_dir():
        raise UsageError(f"no directory {target.parent} for {target.name}")
    return target


def _fields_only(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in META_NAMES])


async def cmd_dead_letters(a: argparse.Namespace) -> int:
    async with open_admin(a.store) as admin:
        letters = await admin.collectors.dead_letters(a.component)
        names = await admin.components()
    if a.broker:  # the broker's dead-letter queues too (adapters that have them)
        letters.extend(
            await _broker_dead_letters(a.broker, [a.component] if a.component else names)
        )
    _print_table(
        ["id", "component", "topic", "offset", "aggregate", "type", "attempts", "error"],
        [
            (
                d.id,
                d.component,
                d.topic,
                d.offset,
                d.aggregate_id,
                d.event_type,
                d.attempts,
                d.error[:60],
            )
            for d in letters
        ],
    )
    return 0


def _when(us: int) -> str:
    from .scheduling import from_us

    return from_us(us).isoformat(timespec="seconds")


async def cmd_schedules(a: argparse.Namespace) -> int:
    """Pending and dead-lettered scheduled commands, each earliest first."""
    statuses: list[Status] = ["pending", "dead"] if a.status is None else [a.status]
    async with open_admin(a.store) as admin:
        found = [s for st in statuses for s in await admin.schedules.find(st, limit=a.limit)]
    _print_table(
        ["id", "status", "due", "topic", "aggregate", "command", "attempts", "error"],
        [
            (
                s.id,
                s.status,
                _when(s.due_at_us),
                s.topic,
                s.aggregate_id,
                s.command_type,
                s.attempts,
                (s.error or "")[:60],
            )
            for s in found
        ],
    )
    return 0


async def cmd_redrive_schedules(a: argparse.Namespace) -> int:
    """Dead-lettered schedules (the given ids, or all) become due now: a running App's
    scheduler fires them."""
    from .ids import now_us

    async with open_admin(a.store) as admin:
        n = await admin.schedules.redrive(a.ids or None, now_us())
    print(f"redriven: {n}")
    return 0


async def _broker_dead_letters(url: str, groups: list[str]) -> list[Any]:
    from .broker import DeadLetterQueues, open_broker

    broker = open_broker(url)
    if not isinstance(broker, DeadLetterQueues):
        raise ReventlessError(f"broker {url.split('://')[0]} has no dead-letter queues to list")
    await broker.connect()
    try:
        found: list[Any] = []
        for group in groups:
            found.extend(await broker.dead_letters(group))
        return found
    finally:
        await broker.close()


def _import(spec: str, what: str) -> Any:
    """``module:attribute``, the module imported with the current directory on the path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{what} must be module:attribute, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{what} {spec}: cannot import {module_name}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{what} {spec}: module {module_name} has no {attr!r}") from None


def _kind(obj: object) -> str:
    return f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def _load_app(spec: str, store: str | None = None) -> App:
    """The App ``spec`` names, or the one its factory returns (``FACTORY_RULE``)."""
    from .app import App

    obj = _import(spec, "--app")
    if isinstance(obj, App):
        if store is not None:
            raise UsageError(f"--app {spec} is an App, not a factory: --store needs a factory")
        return obj
    if not callable(obj):
        raise UsageError(f"--app {spec} is {_kind(obj)}, not an App or a factory")
    kwargs = {} if store is None else {"store": store}
    try:
        inspect.signature(obj).bind(**kwargs)
    except TypeError:
        wanted = "a store keyword (store=URL)" if store is not None else "no arguments"
        raise UsageError(f"--app {spec}: the factory must accept {wanted}") from None
    except ValueError:  # no signature to check (a builtin): the call will tell
        pass
    app = obj(**kwargs)
    if not isinstance(app, App):
        raise UsageError(f"--app {spec} returned {_kind(app)}, not an App")
    return app


async def cmd_infra(a: argparse.Namespace) -> int:
    """Write the infrastructure derived from the app's declarations (no I/O but files)."""
    from .synth import synth, synthesis

    aws_url = None if a.aws_url == "none" else a.aws_url
    nats_url = None if a.nats_url == "none" else a.nats_url
    for url in (aws_url, nats_url):  # a missing adapter fails before any file is written
        if url is not None:
            synthesis(url)
    written = synth(_load_app(a.app), a.out, aws_url=aws_url, nats_url=nats_url, dialects=a.dialect)
    for path in written:
        print(f"wrote {path}")
    return 0


async def cmd_redrive(a: argparse.Namespace) -> int:
    app = _load_app(a.app, a.store)
    if a.component not in app.components:
        known = ", ".join(app.components) or "none"
        raise UsageError(f"--app {a.app} collects no {a.component!r} (it collects: {known})")
    async with app:
        report = await app.redrive(a.component, a.aggregate)
    print(f"redriven: {report.redriven}  still parked: {report.still_parked}")
    return 0 if report.still_parked == 0 else 1


async def cmd_forget(a: argparse.Namespace) -> int:
    app = _load_app(a.app, a.store)
    async with app:
        done = await app.forget(a.subject)
    print(f"forgotten: {done.keys} key(s) destroyed, {done.rows} read-model row(s) erased")
    return 0


async def cmd_master_key(a: argparse.Namespace) -> int:
    from .store.keys import MasterKey

    print(MasterKey.generate().text)
    return 0


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
    from .gateway import BearerTokens

    tokens = _tokens(path)
    try:
        BearerTokens(tokens)
    except ReventlessError as exc:
        raise UsageError(f"--tokens-file {path}: {exc}") from None
    return tokens


def _read_secret(flag: str, path: str) -> str:
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


def _tls(a: argparse.Namespace) -> TlsOptions | None:
    """The TLS options ``serve`` was given, their files checked (None: plain HTTP)."""
    from .gateway import TlsOptions

    if a.ssl_certfile is None:
        given = [
            flag
            for flag, value in (
                ("--ssl-keyfile", a.ssl_keyfile),
                ("--ssl-keyfile-password", a.ssl_keyfile_password),
                ("--ssl-keyfile-password-file", a.ssl_keyfile_password_file),
                ("--ssl-ca-certs", a.ssl_ca_certs),
                ("--ssl-cert-reqs", a.ssl_cert_reqs),
            )
            if value is not None
        ]
        if given:
            raise UsageError(f"{given[0]} needs --ssl-certfile (the server's certificate)")
        return None
    password = a.ssl_keyfile_password
    if a.ssl_keyfile_password_file is not None:
        password = _read_secret("--ssl-keyfile-password-file", a.ssl_keyfile_password_file)
    tls = TlsOptions(
        certfile=a.ssl_certfile,
        keyfile=a.ssl_keyfile,
        keyfile_password=password,
        ca_certs=a.ssl_ca_certs,
        cert_reqs=ssl.CERT_NONE if a.ssl_cert_reqs is None else a.ssl_cert_reqs,
    )
    tls.context()  # a file that cannot be used fails now, in one line
    return tls


async def cmd_serve(a: argparse.Namespace) -> int:
    """Run the HTTP/SSE gateway (extra ``serve``) until SIGTERM or SIGINT."""
    if importlib.util.find_spec("uvicorn") is None:
        raise UsageError("reventless serve needs the extra: pip install 'reventless[serve]'")
    from .gateway import GatewayOptions, create_app, serve

    tokens = _bearer_tokens(a.tokens_file)
    tls = _tls(a)
    key = None
    if a.stream_token_key_file is not None:
        key = _read_secret("--stream-token-key-file", a.stream_token_key_file).encode()
        if len(key) < 16:
            flag = f"--stream-token-key-file {a.stream_token_key_file}"
            raise UsageError(f"{flag}: a key has at least 16 bytes")
    await _check_store(a.store)  # a bad URL fails here, not inside uvicorn's start-up
    app = create_app(
        a.store,
        tokens=tokens,
        options=GatewayOptions(retention_interval=a.retention_interval, stream_token_key=key),
    )
    await serve(app, host=a.host, port=a.port, tls=tls)
    return 0


async def cmd_token(a: argparse.Namespace) -> int:
    """``token hash``: the tokens-file line of a token read from stdin, or of a new one."""
    try:
        from .gateway import hash_token, new_token
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if a.new:
        token = new_token()
        print(f"token: {token}")
        print(f"hash:  {hash_token(token)}")
        return 0
    if sys.stdin.isatty():
        import getpass

        text = getpass.getpass("token (not echoed): ")
    else:
        text = sys.stdin.read()
    lines = text.strip().splitlines()
    if len(lines) != 1:
        raise UsageError(
            "expected one token on stdin (or --new for a new one), "
            f"got {'nothing' if not lines else f'{len(lines)} lines'}"
        )
    print(hash_token(lines[0].strip()))
    return 0


async def cmd_rebuild(a: argparse.Namespace) -> int:
    """Rebuild a read model with Spark (needs the extra ``spark``)."""
    from .collect import ReadModel

    model = _import(a.read_model, "the read model")
    if not isinstance(model, ReadModel):
        raise UsageError(f"{a.read_model} is {_kind(model)}, not a ReadModel")
    app = _load_app(a.app, a.store)
    try:
        from .spark import rebuild
    except ImportError as exc:
        raise UsageError(str(exc)) from exc
    report = await rebuild(
        model,
        app,
        master=a.master,
        as_of=a.as_of,
        source=a.source,
        workdir=a.workdir,
        progress=lambda msg: print(f"  {msg}", file=sys.stderr, flush=True),
    )
    print(
        f"rebuilt {report.model} ({report.path}): events read {report.events_read}, "
        f"events applied {report.events_applied}, rows written {report.rows}, "
        f"seconds {report.seconds:.1f}, table {report.table}"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="reventless",
        description="Inspect and operate reventless stores. A user error prints one line "
        "to stderr and exits 2.",
        epilog=FACTORY_RULE + ".",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def add(name: str, help_: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.add_argument("--store", default="sqlite:///reventless.db", help="store URL")
        return sp

    def app_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--app", required=True, help=FACTORY_RULE)

    offset = _integer(1, "an offset")
    add("topics", "list topics (head offsets) and collectors (checkpoint, lag)")
    t = add("tail", "print a topic's events as JSON lines")
    t.add_argument("topic")
    t.add_argument(
        "--from",
        dest="from_offset",
        type=offset,
        default=None,
        help="first offset (default 1; with --follow: after the head)",
    )
    t.add_argument("--limit", type=_integer(1, "a count"), default=None, help="default 20")
    t.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing events as they are committed, until Ctrl-C (exit 0)",
    )
    e = add("export", "export a topic to a Parquet file (typed Arrow schema)")
    e.add_argument("topic")
    e.add_argument("path")
    e.add_argument("--from", dest="from_offset", type=offset, default=1)
    d = add("dead-letters", "list open dead letters")
    d.add_argument("--component")
    d.add_argument("--broker", default=None, help="also list this broker's dead-letter queues")
    sch = add("schedules", "list pending and dead-lettered scheduled commands")
    sch.add_argument("--status", choices=["pending", "dead"], default=None, help="default both")
    sch.add_argument("--limit", type=_integer(1, "a count"), default=1000, help="per status")
    rs = add("redrive-schedules", "make dead-lettered schedules due now (the app fires them)")
    rs.add_argument("ids", nargs="*", metavar="ID", help="schedule ids (default: all dead)")
    r = sub.add_parser("redrive", help="retry a component's dead letters (needs the app)")
    r.add_argument("component")
    app_arg(r)
    r.add_argument("--store", default=None, help="store URL passed to the --app factory")
    r.add_argument("--aggregate", default=None)
    fg = sub.add_parser(
        "forget",
        help="forget a data subject: destroy its key (crypto-shredding), run on_forget hooks",
    )
    fg.add_argument("subject", help="the data subject's id (what rv.Personal(subject=) holds)")
    app_arg(fg)
    fg.add_argument("--store", default=None, help="store URL passed to the --app factory")
    sub.add_parser(
        "master-key",
        help="print a new random master key (for REVENTLESS_MASTER_KEY or its file)",
    )
    s = add("serve", "run the HTTP/SSE subscription gateway (extra 'serve')")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=_port, default=8000)
    s.add_argument(
        "--tokens-file",
        required=True,
        help="JSON {token or sha256$<hex>: tenant or null} (reventless token hash)",
    )
    s.add_argument("--retention-interval", type=_seconds, default=None, help="seconds")
    s.add_argument(
        "--stream-token-key-file",
        default=None,
        help="file with the key stream tokens are signed with (>= 16 bytes); "
        "default: derived from the plain tokens, random if all are hashes",
    )
    s.add_argument("--ssl-certfile", default=None, help="PEM certificate chain: serve HTTPS")
    s.add_argument("--ssl-keyfile", default=None, help="PEM private key (default: in certfile)")
    pw = s.add_mutually_exclusive_group()
    pw.add_argument(
        "--ssl-keyfile-password", default=None, help="of an encrypted key (ps shows it)"
    )
    pw.add_argument("--ssl-keyfile-password-file", default=None, help="file with the password")
    s.add_argument("--ssl-ca-certs", default=None, help="PEM CA certificates of client certs")
    s.add_argument(
        "--ssl-cert-reqs",
        type=_cert_reqs,
        default=None,
        help="client certificate: none (default), optional or required (mutual TLS)",
    )
    tok = sub.add_parser("token", help="bearer tokens for the gateway's tokens file")
    tsub = tok.add_subparsers(dest="token_cmd", required=True, metavar="COMMAND")
    th = tsub.add_parser(
        "hash",
        help="print the sha256$<hex> line of a token read from stdin (or of a new one)",
        description="Print the tokens-file hash of the token on stdin (a terminal: asked "
        "for without echo), or with --new a new random token and its hash. A token is "
        "never taken as an argument: the shell history and ps would keep it.",
    )
    th.add_argument(
        "--new", action="store_true", help="generate a random token; print it and its hash"
    )
    inf = sub.add_parser("infra", help="infrastructure derived from the app's specs")
    isub = inf.add_subparsers(dest="infra_cmd", required=True, metavar="COMMAND")
    syn = isub.add_parser(
        "synth", help="write a CloudFormation template, JetStream definitions and SQL DDL"
    )
    app_arg(syn)
    syn.add_argument("--out", default="infra/generated", help="output directory")
    syn.add_argument("--aws-url", default="sns+sqs://us-east-1", help="names ('none': skip)")
    syn.add_argument("--nats-url", default="nats://127.0.0.1:4222", help="names ('none': skip)")
    syn.add_argument("--dialect", type=_dialects, default=DIALECTS, help="SQL dialects of the DDL")
    b = sub.add_parser("rebuild", help="rebuild a read model from the log with Spark")
    b.add_argument("read_model", help="module:attribute of the ReadModel")
    app_arg(b)
    b.add_argument("--store", default=None, help="store URL passed to the --app factory")
    b.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    b.add_argument(
        "--as-of",
        dest="as_of",
        type=_integer(1, "an offset"),
        default=None,
        help="state at this offset",
    )
    b.add_argument("--source", default="auto", choices=["auto", "parquet", "jdbc"])
    b.add_argument("--workdir", default=None, help="segments and staging files")
    return p


async def _check_store(url: str) -> None:
    """Open and close the store at ``url`` (``StoreError`` if it cannot be reached)."""
    db = Database(url)
    await db.open()
    await db.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reventless`` console script: the command's exit status (2 and
    one line on stderr for a user error)."""
    a = _parser().parse_args(argv)
    handlers = {
        "serve": cmd_serve,
        "token": cmd_token,
        "infra": cmd_infra,
        "topics": cmd_topics,
        "tail": cmd_tail,
        "export": cmd_export,
        "dead-letters": cmd_dead_letters,
        "redrive": cmd_redrive,
        "schedules": cmd_schedules,
        "redrive-schedules": cmd_redrive_schedules,
        "rebuild": cmd_rebuild,
        "forget": cmd_forget,
        "master-key": cmd_master_key,
    }
    try:
        return asyncio.run(handlers[a.cmd](a))
    except ReventlessError as exc:
        print(f"reventless: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (| head): not an error
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file or a connection the user named
        where = f": {exc.filename}" if exc.filename else ""
        print(f"reventless: {_one_line(exc.strerror or str(exc))}{where}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
