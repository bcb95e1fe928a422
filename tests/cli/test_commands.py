"""The commands' happy paths as a user runs them: tables, ``--json`` a script can parse,
progress on stderr (plain lines: the test's stderr is a pipe), shell completion, and a
component's dead letters listed, counted and redriven with progress."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pyarrow.parquet as pq

from tests.cli.conftest import EVENTS
from tests.cli.process import ROOT, command, env, reventless, user_error

COMMANDS = [
    "topics", "status", "tail", "export", "dead-letters", "redrive", "replay", "schedules",
    "redrive-schedules", "rebuild", "forget", "master-key", "serve", "token", "infra", "docs",
]  # fmt: skip

#: An app whose side effect fails on every fifth ping until the file ``healed`` exists
#: beside the module (dead letters to list, count, redrive), and writes what it sent to
#: ``sent.txt`` (what a replay sends again).
FLAKY = """
from pathlib import Path

import reventless as rv

HEALED = Path(__file__).with_name("healed")
SENT = Path(__file__).with_name("sent.txt")


class Pinged(rv.Event):
    n: int


class Ping(rv.Command):
    n: int


class Pinger(rv.Aggregate):
    events = Pinged

    @rv.handles(Ping)
    def ping(self, cmd: Ping) -> Pinged:
        return Pinged(n=cmd.n)

    @rv.applies(Pinged)
    def _pinged(self, e: Pinged) -> None:
        pass


def app(store: str) -> rv.App:
    app = rv.App(store=store)
    app.event_log(Pinger)
    flaky = rv.SideEffectHandler("flaky")

    @flaky.on(Pinged)
    def _send(ev: rv.Envelope[Pinged]) -> None:
        if ev.event.n % 5 == 0 and not HEALED.exists():
            raise ConnectionError(f"webhook down for {ev.event.n}")
        with SENT.open("a") as f:
            f.write(f"{ev.event.n}\\n")

    app.collect(flaky)
    return app
"""


def test_help_lists_every_command_and_the_factory_rule() -> None:
    result = reventless("--help", cwd=ROOT)
    assert (result.returncode, result.stderr) == (0, "")
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("│ ")}
    assert set(COMMANDS) <= listed, listed
    assert "--install-completion" in result.stdout
    sub = reventless("status", "--help", cwd=ROOT)
    assert sub.returncode == 0 and "--watch" in sub.stdout and "--interval" in sub.stdout


def test_shell_completion_script_and_answers() -> None:
    script = reventless("--show-completion", "bash", cwd=ROOT)
    assert script.returncode == 0 and "_REVENTLESS_COMPLETE=complete_bash" in script.stdout
    words = {"COMP_WORDS": "reventless sta", "COMP_CWORD": "1"}
    done = subprocess.run(
        command(),
        env={**env(), "_REVENTLESS_COMPLETE": "complete_bash", **words},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.split()) == (0, ["status"])


def test_topics_table_and_json(counter_store: str, tmp_path: Path) -> None:
    table = reventless("topics", "--store", counter_store, cwd=tmp_path)
    assert (table.returncode, table.stderr) == (0, "")
    assert "Counter" in table.stdout and "counter_totals" in table.stdout
    result = reventless("topics", "--store", counter_store, "--json", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    got = json.loads(result.stdout)
    assert got["topics"] == [
        {"name": "Counter", "kind": "aggregate", "tenant": None, "partitions": 1,
         "head": EVENTS, "table": "ev_counter"}
    ]  # fmt: skip
    [collector] = got["collectors"]
    assert collector == {
        "component": "counter_totals", "topic": "Counter", "checkpoint": EVENTS, "lag": 0,
        "state": "ok",
        "partitions": [{"partition": 0, "checkpoint": EVENTS, "head": EVENTS, "lag": 0}],
    }  # fmt: skip


def test_status_once(counter_store: str, tmp_path: Path) -> None:
    shown = reventless("status", "--store", counter_store, cwd=tmp_path)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert "heads" in shown.stdout and "lag (max 0)" in shown.stdout
    assert "dead letters: 0" in shown.stdout
    got = json.loads(reventless("status", "--store", counter_store, "--json", cwd=tmp_path).stdout)
    assert set(got) == {"at", "topics", "collectors", "dead_letters", "dead_letters_total"}
    assert (got["dead_letters"], got["dead_letters_total"]) == ({}, 0)
    both = reventless("status", "--watch", "--json", "--store", counter_store, cwd=tmp_path)
    user_error(both, "--json does not go with --watch")
    user_error(reventless("status", "--interval", "0", cwd=tmp_path), "--interval", "'0'")


def test_schedules_and_dead_letters_json_when_empty(counter_store: str, tmp_path: Path) -> None:
    for cmd in ("schedules", "dead-letters"):
        result = reventless(cmd, "--store", counter_store, "--json", cwd=tmp_path)
        assert (result.returncode, result.stderr, json.loads(result.stdout)) == (0, "", [])


def test_export_shows_progress_as_plain_lines(counter_store: str, tmp_path: Path) -> None:
    out = tmp_path / "counter.parquet"
    result = reventless("export", "Counter", str(out), "--store", counter_store, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {EVENTS} rows to {out}\n"
    # no escape codes, no bar: stderr is a pipe. A slow machine may print a progress line
    # (one a second) before the final one; every line is plain and the last says it is done.
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("export Counter: ") for line in lines), lines
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    *before, line = lines
    assert line.startswith(f"export Counter: {EVENTS}/{EVENTS} rows (100.0%) ")
    assert "rows/s in " in line
    assert all(" ETA " in earlier or "rows/s" in earlier for earlier in before), before
    assert pq.read_table(out).column("by").to_pylist() == list(range(1, EVENTS + 1))


def _flaky(tmp_path: Path) -> ModuleType:
    path = tmp_path / "flaky_app.py"
    path.write_text(FLAKY)
    spec = importlib.util.spec_from_file_location(f"flaky_app_{os.getpid()}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_dead_letters_listed_counted_and_redriven(tmp_path: Path) -> None:
    module = _flaky(tmp_path)
    url = f"sqlite:///{tmp_path / 'flaky.db'}"
    app = module.app(url)
    log = app.event_log(module.Pinger)
    async with app:
        for i in range(1, EVENTS + 1):
            await log.execute(f"p-{i % 3}", module.Ping(n=i))
        await app.settle()
    listed = reventless("dead-letters", "--store", url, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    letters = json.loads(listed.stdout)
    # offsets 5 and 10 failed; 8 and 11 wait behind 5 (same aggregate, p-2)
    assert sorted(d["offset"] for d in letters) == [5, 8, 10, 11]
    assert {d["component"] for d in letters} == {"flaky"}
    assert sum("webhook down" in d["error"] for d in letters) == 2
    status = json.loads(reventless("status", "--store", url, "--json", cwd=tmp_path).stdout)
    assert (status["dead_letters"], status["dead_letters_total"]) == ({"flaky": 4}, 4)

    (tmp_path / "healed").touch()
    redriven = reventless(
        "redrive", "flaky", "--app", "flaky_app:app", "--store", url, cwd=tmp_path
    )
    assert redriven.returncode == 0, redriven.stderr
    assert "redriven: 4  still parked: 0" in redriven.stdout
    assert redriven.stderr.splitlines()[-1].startswith("redrive flaky: 4/4 letters (100.0%)")
    after = reventless("dead-letters", "--store", url, "--json", cwd=tmp_path)
    assert json.loads(after.stdout) == []
    sent = tmp_path / "sent.txt"
    assert sorted(map(int, sent.read_text().split())) == list(range(1, EVENTS + 1))

    # replay: the side effect runs again over offsets 10-12, its checkpoint unmoved
    replay = ("replay", "flaky", "--app", "flaky_app:app", "--store", url)
    again = reventless(*replay, "--from", "10", "--to", "12", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (0, "replayed: 3\n"), again.stderr
    assert again.stderr.startswith("replay flaky: 3/3 events (100.0%)")
    assert sent.read_text().split()[-3:] == ["10", "11", "12"]
    (tmp_path / "healed").unlink()  # down again: the replay stops at offset 5
    stopped = reventless(*replay, "--from", "4", "--to", "6", cwd=tmp_path)
    assert stopped.returncode == 1, stopped.stderr
    assert "replayed: 1; stopped at Pinger offset 5: ConnectionError: webhook down for 5" in (
        stopped.stdout
    )
    assert "(resume with --from 5)" in stopped.stdout
    assert sent.read_text().split()[-1] == "4"
    topics = json.loads(reventless("topics", "--store", url, "--json", cwd=tmp_path).stdout)
    assert [c["checkpoint"] for c in topics["collectors"]] == [EVENTS]


def test_replay_refuses_a_read_model() -> None:
    result = reventless(
        "replay", "order_summaries", "--app", "examples.shop.model:app", "--from", "1", cwd=ROOT
    )
    user_error(result, "order_summaries is a read model", "reventless rebuild")


def test_docs_asyncapi_writes_the_document_for_the_brokers_given(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.json"
    result = reventless(
        "docs", "asyncapi", "--app", "examples.shop.model:app", "--out", str(out), cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["asyncapi"].startswith("3.")
    result = reventless(
        "docs", "asyncapi", "--app", "examples.shop.model:app", "--out", str(out),
        "--broker", "nats://127.0.0.1:4222?prefix=shop", "--broker", "memory://", cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert {s["protocol"] for s in doc["servers"].values()} == {"nats", "memory"}
    assert any(c["address"].startswith("shop.") for c in doc["channels"].values())
    bad = reventless(
        "docs", "asyncapi", "--app", "examples.shop.model:app", "--broker", "bogus://x", cwd=ROOT
    )
    user_error(bad, "unknown broker URL scheme 'bogus'")


def test_master_key_and_token_hash() -> None:
    key = reventless("master-key", cwd=ROOT)
    assert key.returncode == 0 and len(key.stdout.strip()) == 44
    new = reventless("token", "hash", "--new", cwd=ROOT)
    assert new.returncode == 0, new.stderr
    token, hashed = (line.split(":", 1)[1].strip() for line in new.stdout.splitlines())
    again = subprocess.run(
        command("token", "hash"), input=token + "\n", env=env(), capture_output=True, text=True
    )
    assert (again.returncode, again.stdout.strip()) == (0, hashed)
