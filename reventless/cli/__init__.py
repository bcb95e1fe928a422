"""The ``reventless`` command (typer + rich): inspect and operate a store, mostly without
the application's code.

Example::

    reventless topics --store sqlite:///shop.db            # tables; --json for scripts
    reventless status --store sqlite:///shop.db --watch    # live heads, lag, dead letters
    reventless tail Order --store sqlite:///shop.db --limit 5
    reventless tail Order --store sqlite:///shop.db --follow      # until Ctrl-C
    reventless export Order orders.parquet --store sqlite:///shop.db
    reventless dead-letters --store sqlite:///shop.db
    reventless redrive order_confirmations --app examples.shop.model:app --store sqlite:///shop.db
    reventless replay order_confirmations --app examples.shop.model:app --from 100
    reventless schedules --store sqlite:///shop.db                # pending and dead-lettered
    reventless redrive-schedules --store sqlite:///shop.db        # dead ones due again now
    reventless serve --store sqlite:///shop.db --tokens-file tokens.json --port 8000
    reventless token hash --new          # a new bearer token and its tokens-file hash
    reventless rebuild examples.shop.stats:customer_orders --app examples.shop.model:app
    reventless docs asyncapi --app examples.shop.model:app --out asyncapi.json
    reventless stream examples.shop.revenue_stream:sku_hours --app examples.shop.revenue_stream:app

``--app`` and the read model are ``module:attribute`` imported from the current
directory, as uvicorn and celery do. A user error (a bad argument, an unknown topic, a
store that cannot be opened, a module that does not import) prints one line to stderr,
``reventless: error: ...``, and exits 2; nothing is half-written. Heavy modules (pyarrow's
Parquet writer, Spark, the gateway's web stack) are imported by the commands using them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from ..errors import ReventlessError
from . import letters, log, operations, replay, serving, status, streaming
from .loading import FACTORY_RULE
from .run import INTERRUPTED, USER_ERROR, UsageError, one_line

__all__ = ["FACTORY_RULE", "UsageError", "build", "main"]


def build() -> typer.Typer:
    """The command tree (a new one per call: no state shared between runs)."""
    app = typer.Typer(
        name="reventless",
        help="Inspect and operate reventless stores. A user error prints one line to "
        "stderr and exits 2.",
        epilog=FACTORY_RULE + ".",
        no_args_is_help=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.command("topics")(log.topics)
    app.command("status")(status.status)
    app.command("tail")(log.tail)
    app.command("export")(log.export)
    app.command("dead-letters")(letters.dead_letters)
    app.command("redrive")(letters.redrive)
    app.command("replay")(replay.replay)
    app.command("schedules")(letters.schedules)
    app.command("redrive-schedules")(letters.redrive_schedules)
    app.command("rebuild")(operations.rebuild)
    app.command("forget")(operations.forget)
    app.command("master-key")(operations.master_key)
    app.command("serve")(serving.serve)
    app.command("stream")(streaming.stream)

    token = typer.Typer(help="Bearer tokens for the gateway's tokens file.")
    token.command("hash")(serving.token_hash)
    app.add_typer(token, name="token")

    infra = typer.Typer(help="Infrastructure derived from the app's specs.")
    infra.command("synth")(operations.infra_synth)
    app.add_typer(infra, name="infra")

    docs = typer.Typer(help="Documents generated from the app's declarations.")
    docs.command("asyncapi")(operations.asyncapi)
    app.add_typer(docs, name="docs")
    return app


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``reventless`` console script: the command's exit status (2 and
    one line on stderr for a user error, 130 for Ctrl-C)."""
    command = typer.main.get_command(build())
    try:
        code = command.main(
            args=list(sys.argv[1:] if argv is None else argv),
            prog_name="reventless",
            standalone_mode=False,
        )
    except typer.TyperException as exc:  # usage errors: one line, not typer's box
        message = one_line(exc.format_message()).replace(": Value error, ", ": ")
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:  # a usage error: where to read the usage
            message += f" (see {ctx.command_path} --help)"
        print(f"reventless: error: {message}", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        return INTERRUPTED
    except ReventlessError as exc:  # raised before a command's coroutine ran
        print(f"reventless: error: {one_line(str(exc))}", file=sys.stderr)
        return USER_ERROR
    return code if isinstance(code, int) else 0
