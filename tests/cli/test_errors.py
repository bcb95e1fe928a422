"""Every user error of every subcommand: exit status 2, one line on stderr, no traceback,
and nothing written."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.cli.process import ROOT, reventless, user_error
from tests.services import free_port

FACTORIES = """
import reventless as rv

the_app = rv.App(store="sqlite://")
NAME = "shop"


def no_store() -> rv.App:
    return rv.App(store="sqlite://")


def not_an_app(store: str = "") -> int:
    return 1
"""


def case(name: str, line: str, *needles: str) -> Any:
    """A command line (``{store}``: a filled store, ``{tmp}``: the working directory,
    ``{port}``: a closed port) and what its one line of stderr says."""
    return pytest.param(shlex.split(line), needles, id=name)


CASES = [
    case("no-command", "", "Missing command", "reventless --help"),
    case("unknown-command", "bogus", "No such command 'bogus'"),
    case("bad-store-scheme", "topics --store foo://x", "unsupported store URL scheme"),
    case("unparsable-store", "topics --store ::", "cannot parse store URL"),
    case("missing-sqlite-file", "topics --store sqlite:///{tmp}/none.db", "no store at"),
    case("missing-sqlite-dir", "tail X --store sqlite:///{tmp}/a/b.db", "no store at"),
    case("empty-sqlite-file", "topics --store sqlite:///{tmp}/empty.db", "no reventless"),
    case("memory-store", "dead-letters --store sqlite://", "holds no reventless store"),
    case("unreachable-db", "topics --store postgresql://u@127.0.0.1:{port}/x", "cannot open"),
    case("unknown-topic", "tail Nope --store {store}", "no topic 'Nope'"),
    case("follow-unknown-topic", "tail Nope -f --store {store}", "no topic 'Nope'"),
    case(
        "tail-no-topic",
        "tail --store {store}",
        "Missing argument 'topic'",
        "reventless tail --help",
    ),
    case("tail-from-zero", "tail Counter --from 0 --store {store}", "--from"),
    case("tail-from-text", "tail Counter --from x --store {store}", "'x'"),
    case("tail-limit-negative", "tail Counter --limit -1", "--limit", "'-1'"),
    case("tail-limit-follow", "tail Counter -f --limit 3 --store {store}", "--limit"),
    case("export-no-dir", "export Counter {tmp}/no/x.parquet --store {store}", "no directory"),
    case("export-to-dir", "export Counter {tmp} --store {store}", "is a directory"),
    case("export-unknown-topic", "export Nope {tmp}/x.parquet --store {store}", "no topic"),
    case("export-from-text", "export Counter {tmp}/x.parquet --from one", "--from"),
    case(
        "dead-letters-bad-broker",
        "dead-letters --broker foo://x --store {store}",
        "unknown broker URL scheme",
    ),
    case("redrive-no-app", "redrive c", "Missing option '--app'"),
    case("redrive-app-no-colon", "redrive c --app factories", "module:attribute"),
    case(
        "redrive-no-module",
        "redrive c --app nowhere:app",
        "cannot import nowhere",
        "No module named 'nowhere'",
    ),
    case("redrive-no-attribute", "redrive c --app factories:nope", "has no 'nope'"),
    case("redrive-not-callable", "redrive c --app factories:NAME", "is a str"),
    case("redrive-not-an-app", "redrive c --app factories:not_an_app", "returned a int"),
    case(
        "redrive-app-with-store",
        "redrive c --app factories:the_app --store {store}",
        "not a factory",
    ),
    case(
        "redrive-factory-without-store",
        "redrive c --app factories:no_store --store {store}",
        "must accept a store keyword",
    ),
    case("redrive-unknown-component", "redrive c --app factories:the_app", "collects no 'c'"),
    case("serve-no-tokens", "serve", "Missing option '--tokens-file'"),
    case("serve-missing-tokens", "serve --tokens-file {tmp}/none.json", "No such file"),
    case("serve-tokens-not-json", "serve --tokens-file {tmp}/factories.py", "not JSON"),
    case(
        "serve-tokens-not-object", "serve --tokens-file {tmp}/list.json", "expected a JSON object"
    ),
    case("serve-bad-port", "serve --tokens-file {tmp}/tokens.json --port 70000", "--port"),
    case(
        "serve-bad-interval",
        "serve --tokens-file {tmp}/tokens.json --retention-interval 0",
        "seconds",
    ),
    case(
        "serve-bad-store",
        "serve --tokens-file {tmp}/tokens.json --store foo://x",
        "unsupported store URL",
    ),
    case(
        "serve-unreachable",
        "serve --tokens-file {tmp}/tokens.json --store sqlite:///{tmp}/a/b.db",
        "cannot open store",
    ),
    case("synth-bad-dialect", "infra synth --app factories:the_app --dialect mysql", "--dialect"),
    case("synth-no-subcommand", "infra", "Missing command", "reventless infra --help"),
    case(
        "synth-out-is-a-file",
        "infra synth --app factories:the_app --out {tmp}/tokens.json"
        " --aws-url none --nats-url none",
        "File exists",
    ),
    case(
        "synth-unknown-broker",
        "infra synth --app factories:the_app --out {tmp}/gen --nats-url foo://x",
        "foo",
    ),
    case("rebuild-no-colon", "rebuild totals --app factories:the_app", "module:attribute"),
    case(
        "rebuild-not-a-read-model",
        "rebuild factories:no_store --app factories:the_app",
        "not a ReadModel",
    ),
    case(
        "rebuild-class-not-a-read-model",
        "rebuild reventless:App --app factories:the_app",
        "the class App",
    ),
    case("rebuild-as-of-zero", "rebuild m:r --app m:a --as-of 0", "--as-of"),
    case("rebuild-bad-source", "rebuild m:r --app m:a --source csv", "--source"),
]


@pytest.mark.parametrize(("args", "needles"), CASES)
def test_user_error_is_one_line_and_exit_2(
    args: list[str], needles: tuple[str, ...], counter_store: str, tmp_path: Path
) -> None:
    (tmp_path / "factories.py").write_text(FACTORIES)
    (tmp_path / "empty.db").write_bytes(b"")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "tokens.json").write_text(json.dumps({"operator-token": None}))
    before = sorted(p.name for p in tmp_path.iterdir())
    filled = {"store": counter_store, "tmp": str(tmp_path), "port": str(free_port())}
    result = reventless(*(a.format(**filled) for a in args), cwd=tmp_path)
    user_error(result, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created


def test_the_help_says_what_a_factory_takes() -> None:
    result = reventless("--help", cwd=ROOT)
    assert result.returncode == 0
    assert "called as attr(store=URL)" in " ".join(result.stdout.split())
