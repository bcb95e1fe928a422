"""Bearer tokens given as ``sha256$<hex>`` hashes: the gateway accepts the token a hash
stands for (beside plain tokens), refuses a malformed hash when it starts, never at request
time, and never names a token or hash in an error or a log line; ``reventless token hash``
writes the lines."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import subprocess
from pathlib import Path

import httpx
import pytest

import reventless as rv
from examples.search_index.sse import read_events
from reventless.cli import main
from reventless.errors import ReventlessError
from reventless.gateway import BearerTokens, GatewayOptions, create_app, hash_token, new_token
from tests.cli.process import command, env, user_error
from tests.gateway.conftest import auth, serve
from tests.subscribe.conftest import order_rows, orders_app

ACME = "acme-7Yq2mW0pXv3LkR9sTb4NcZ"
OPS = "ops-Qm5Hx1Jd8Wn2Vr6Tz0Ls3P"
HASHED = {hash_token(ACME): "acme", hash_token(OPS): None, "globex-token-1": "globex"}


def test_hash_token_is_sha256_of_the_token() -> None:
    assert hash_token(ACME) == "sha256$" + hashlib.sha256(ACME.encode()).hexdigest()
    token = new_token()
    assert len(token) == 43 and token != new_token()
    assert BearerTokens({hash_token(token): "t"}).tenant_of(token) == (True, "t")


@pytest.mark.parametrize(
    "token",
    ["short-token-15c", "with space in it ok", "tab\tinside-a-long-one", "naïve-but-long-enough"],
)
def test_hash_token_refuses_short_or_non_ascii_tokens(token: str) -> None:
    with pytest.raises(ReventlessError):
        hash_token(token)


def test_plain_tokens_and_hashes_side_by_side() -> None:
    tokens = BearerTokens(HASHED)
    assert tokens.tenant_of(ACME) == (True, "acme")
    assert tokens.tenant_of(OPS) == (True, None)
    assert tokens.tenant_of("globex-token-1") == (True, "globex")
    assert tokens.plain == 1
    for wrong in (ACME[:-1], ACME + "x", hash_token(ACME), hash_token(ACME)[7:], ""):
        assert tokens.tenant_of(wrong) == (False, None)  # the hash text is no password
    upper = "sha256$" + hashlib.sha256(ACME.encode()).hexdigest().upper()
    assert BearerTokens({upper: "acme"}).tenant_of(ACME) == (True, "acme")


GOOD = hashlib.sha256(b"x" * 20).hexdigest()
MALFORMED = {
    "short-hex": "sha256$" + GOOD[:-1],
    "long-hex": "sha256$" + GOOD + "0",
    "not-hex": "sha256$" + "g" * 64,
    "no-hex": "sha256$",
    "upper-scheme": "SHA256$" + GOOD,
    "scrypt": "scrypt$16384$8$1$c2FsdA$" + GOOD,
    "bcrypt": "$2b$12$R9h/cIPz0gi.URNNX3kh2OPST9/PgBkqquzi.Ss7KIUgO2t0jWMUW",
    "dollar-in-plain": "plain-with-$-inside",
    "trailing-space": f"sha256${GOOD} ",
}


@pytest.mark.parametrize("key", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_hash_is_refused_without_echoing_it(key: str) -> None:
    with pytest.raises(ReventlessError, match="tenant 'acme' is not a well-formed") as caught:
        create_app("sqlite://", tokens={"ops-token-1": None, key: "acme"})
    assert not leaks(key, str(caught.value))


def leaks(key: str, message: str) -> bool:
    """Whether ``message`` shows ``key`` or its hex digits (the scheme is no secret)."""
    secret = key.removeprefix("sha256$").strip()
    return GOOD in message or (secret != "" and secret in message)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ({}, "at least one bearer token"),
        ({"short": "acme"}, "tenant 'acme': a bearer token has at least 8"),
        ({ACME: "acme", hash_token(ACME): "globex"}, "repeats another entry's token"),
        ({ACME: 3}, "a tenant is a string or null"),
    ],
    ids=["empty", "short", "plain-and-hashed", "bad-tenant"],
)
def test_a_malformed_mapping_is_refused(tokens: dict[str, str | None], message: str) -> None:
    with pytest.raises(ReventlessError, match=message) as caught:
        BearerTokens(tokens)
    assert ACME not in str(caught.value)


async def test_the_gateway_serves_hashed_tokens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Right token 200, wrong 401 (JSON, never a 500), tenant scoping as for plain tokens,
    and no token or hash in any log line."""
    caplog.set_level(logging.DEBUG)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    async with app:
        await topic.publish(order_rows(2), meta=rv.Metadata(tenant="acme"))
        await topic.publish(order_rows(3, start=2), meta=rv.Metadata(tenant="globex"))
    async with serve(url, tokens=HASHED) as base, httpx.AsyncClient(base_url=base) as http:
        created = await http.post("/subscriptions", json={"topic": "orders"}, headers=auth(ACME))
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        page = (await http.get(f"/subscriptions/{sid}/events", headers=auth(ACME))).json()
        assert [e["data"]["qty"] for e in page["events"]] == [0, 1]
        assert (await http.get("/subscriptions", headers=auth(OPS))).json() == [sid]
        assert (await http.get("/subscriptions", headers=auth("globex-token-1"))).json() == []
        for wrong in (ACME + "x", hash_token(ACME), GOOD, "x" * 4000):
            r = await http.get("/subscriptions", headers=auth(wrong))
            assert r.status_code == 401, r.text
            assert r.json()["error"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
    server = ("reventless", "uvicorn", "starlette")  # the client's own logs are not ours
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith(server))
    for secret in (ACME, OPS, hash_token(ACME)[7:], hash_token(OPS)[7:]):
        assert secret not in logged


async def test_stream_tokens_of_a_hashes_only_file(tmp_path: Path) -> None:
    """With only hashes nothing in the file is secret: stream tokens are signed with the
    given key (so two gateways sharing it accept each other's), else a random one."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    app, topic = orders_app(url)
    async with app:
        await topic.publish(order_rows(2), meta=rv.Metadata(tenant="acme"))
    only_hashes = {hash_token(ACME): "acme"}
    key = b"k" * 32
    async with (
        serve(url, tokens=only_hashes, stream_token_key=key) as one,
        serve(url, tokens=only_hashes, stream_token_key=key) as two,
        serve(url, tokens=only_hashes) as random_key,
        httpx.AsyncClient(timeout=10) as http,
    ):
        created = await http.post(
            f"{one}/subscriptions", json={"topic": "orders"}, headers=auth(ACME)
        )
        sid = created.json()["id"]
        minted = await http.post(f"{one}/subscriptions/{sid}/stream-tokens", headers=auth(ACME))
        token = minted.json()["token"]
        stream = f"{two}/subscriptions/{sid}/stream?access_token={token}"
        async with http.stream("GET", stream) as r:
            assert r.status_code == 200
            async for frame in read_events(r):
                assert frame.json()["data"]["qty"] == 0
                break
        r = await http.get(f"{random_key}/subscriptions/{sid}/stream?access_token={token}")
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    with pytest.raises(ReventlessError, match="16 bytes"):
        create_app(url, tokens=only_hashes, options=GatewayOptions(stream_token_key=b"short"))


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), input=stdin, env=env(), capture_output=True, text=True, timeout=60
    )


def test_token_hash_command() -> None:
    hashed = run("token", "hash", stdin=ACME + "\n")
    assert hashed.returncode == 0, hashed.stderr
    assert hashed.stdout == hash_token(ACME) + "\n"
    assert ACME not in hashed.stdout + hashed.stderr
    new = run("token", "hash", "--new")
    assert new.returncode == 0, new.stderr
    lines = dict(line.split(":", 1) for line in new.stdout.splitlines())
    token, line = lines["token"].strip(), lines["hash"].strip()
    assert BearerTokens({line: "t"}).tenant_of(token) == (True, "t")


@pytest.mark.parametrize(
    ("stdin", "needle"),
    [
        ("", "expected one token on stdin"),
        ("\n\n", "expected one token on stdin"),
        (f"{ACME}\n{OPS}\n", "got 2 lines"),
        ("too-short\n", "at least 16 characters"),
        ("two words but long enough\n", "visible ASCII"),
    ],
    ids=["empty", "blank", "two-lines", "short", "space"],
)
def test_token_hash_refuses_bad_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stdin: str, needle: str
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["token", "hash"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err, err
    assert "too-short" not in err and "two words" not in err and ACME not in err


def test_token_hash_takes_no_token_argument() -> None:
    result = user_error(run("token", "hash", ACME), "never taken as an argument")
    assert ACME not in result


@pytest.mark.parametrize("key", MALFORMED.values(), ids=MALFORMED.keys())
def test_serve_refuses_a_malformed_hash_at_startup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({hash_token(OPS): None, key: "acme"}))
    store = f"sqlite:///{tmp_path / 'never-created.db'}"
    assert main(["serve", "--tokens-file", str(tokens), "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--tokens-file {tokens}: the entry of tenant 'acme'" in err
    assert not leaks(key, err)
    assert not (tmp_path / "never-created.db").exists()  # refused before the store opened


def test_the_serve_script_refuses_a_malformed_hash(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"ops-token-1": None, MALFORMED["bcrypt"]: "acme"}))
    result = run("serve", "--tokens-file", str(tokens), "--store", "sqlite://")
    line = user_error(result, "the entry of tenant 'acme' is not a well-formed token hash")
    assert not leaks(MALFORMED["bcrypt"], line)
