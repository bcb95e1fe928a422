"""schemathesis against a live gateway (a uvicorn process on a SQLite file): every
documented operation, with data that fits the OpenAPI document and data that does not,
must never answer 500 and must answer as documented (status code, content type, body
schema, headers). The SSE stream of a subscription that exists never ends, which
schemathesis cannot consume: its cases only get its refusals (``test_openapi.py`` checks
a stream).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from prometheus_client.parser import text_string_to_metric_families
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from reventless.gateway import create_app
from reventless.gateway.openapi import document
from tests.gateway.conftest import TOKENS
from tests.services import free_port, stop_process
from tests.subscribe.conftest import order_rows, orders_app

pytestmark = pytest.mark.slow

#: Examples per operation and generation mode (~1,700 requests in all, ~30 s).
EXAMPLES = int(os.environ.get("REVENTLESS_SCHEMATHESIS_EXAMPLES", "50"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
OPERATOR, ACME = "operator-token", "acme-token-1"
#: Most cases carry a valid token (an operator's or a tenant's) and are pointed at the
#: token's own subscription and at the topic that exists, so they reach past
#: "unauthorized" and "not found".
KNOWN_TOPIC = "orders"
TOKENS_USED = [OPERATOR, OPERATOR, ACME, "not-a-token"]


def gateway() -> Any:
    """The app the uvicorn process serves (``--factory``): the store in ``RV_STORE``."""
    return create_app(os.environ["RV_STORE"], tokens=TOKENS)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway process on a SQLite file holding topic ``orders`` and subscription ``s1``."""
    url = f"sqlite:///{tmp_path_factory.mktemp('gw') / 'store.db'}"

    async def fill() -> None:
        app, topic = orders_app(url)
        async with app:
            await topic.publish(order_rows(50))

    asyncio.run(fill())
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "--factory",
            "tests.gateway.test_openapi_schemathesis:gateway",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        ],
        cwd=root,
        env={**os.environ, "RV_STORE": url},
        stderr=subprocess.PIPE,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the gateway did not start"
            time.sleep(0.05)
        yield base
    finally:
        stop_process(proc)  # type: ignore[arg-type]


def _known(base: str, subs: dict[str, str]) -> None:
    """A subscription of each token's in ``subs``, created anew where a case closed it
    (a closed subscription's id stays taken)."""
    for token in (OPERATOR, ACME):
        auth = {"Authorization": f"Bearer {token}"}
        sub = subs.get(token)
        if sub and httpx.get(f"{base}/subscriptions/{sub}", headers=auth).status_code == 200:
            continue
        r = httpx.post(f"{base}/subscriptions", json={"topic": KNOWN_TOPIC}, headers=auth)
        assert r.status_code == 201, r.text
        subs[token] = r.json()["id"]


def _aim(case: Any, token: str, known: bool, subs: dict[str, str]) -> None:
    """Point a case at the token's subscription and the topic (still valid input)."""
    if not known:
        return
    if case.path_parameters and "id" in case.path_parameters and token in subs:
        case.path_parameters["id"] = subs[token]
    if isinstance(case.body, dict) and "topic" in case.body:
        case.body["topic"] = KNOWN_TOPIC
        case.body.pop("id", None)  # a fresh id each time, or a 400 "exists"
    if isinstance(case.body, dict):  # 7.0 is an integer to JSON Schema, not to the gateway
        for k, v in case.body.items():
            if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
                case.body[k] = int(v)


@dataclass
class Findings:
    """What a run found per operation, and the status codes it saw."""

    found: list[str] = field(default_factory=list)
    seen: dict[str, Counter[int]] = field(default_factory=dict)
    ran: int = 0


def fuzz(schema: Any, base: str, examples: int, only: str | None = None) -> Findings:
    """Run schemathesis on every operation of ``schema`` (``only``: one path), with
    positive and negative data, against the gateway at ``base``. The SSE stream of a
    subscription that exists never ends, so its cases keep their generated ids (which
    name none) and check the stream's refusals only."""
    out = Findings()
    subs: dict[str, str] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        if only is not None and op.path != only:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(
                case=op.as_strategy(generation_mode=mode),
                known=st.integers(0, 3).map(bool),
                token=st.sampled_from(TOKENS_USED),
            )
            def run(case: Any, known: bool, token: str) -> None:
                _aim(case, token, known and not case.path.endswith("/stream"), subs)
                headers = {"Authorization": f"Bearer {token}"}
                r = case.call_and_validate(
                    base_url=base, headers=headers, checks=CHECKS, timeout=10
                )
                out.seen.setdefault(f"{case.method} {case.path}", Counter())[r.status_code] += 1

            _known(base, subs)
            try:
                run()
            except Unsatisfiable:  # no parameters, no body: nothing to make invalid
                assert mode.is_negative
                continue
            except (Exception, BaseExceptionGroup) as exc:  # every operation's findings
                out.found.append(f"{op.method.upper()} {op.path} ({mode}): {exc}")
            out.ran += 1
    return out


def test_no_server_error_and_every_answer_as_documented(live: str) -> None:
    got = fuzz(schemathesis.openapi.from_url(f"{live}/openapi.json"), live, EXAMPLES)
    print("\n".join(f"{k}: {dict(v)}" for k, v in sorted(got.seen.items())))
    assert not got.found, "\n\n".join(got.found)
    assert got.ran >= 19 + 13  # positive: all; negative: those with parameters or a body
    # on every operation some cases got past the token, input and "not found" checks
    stream = got.seen.pop("GET /subscriptions/{id}/stream")
    assert 404 in stream and set(stream) <= {400, 401, 404}, stream
    assert all(set(c) - {400, 401, 404} for c in got.seen.values()), got.seen


def test_the_checks_catch_a_gateway_that_differs_from_its_document(live: str) -> None:
    """The same run against documents that are wrong in two ways fails on each."""
    doc = document()
    doc["components"]["schemas"]["Status"]["properties"]["acked"] = {"type": "string"}
    got = fuzz(schemathesis.openapi.from_dict(doc), live, 10, only="/subscriptions/{id}")
    assert any("acked" in f for f in got.found), got.found

    doc = document()
    del doc["paths"]["/topics"]["get"]["responses"]["401"]
    got = fuzz(schemathesis.openapi.from_dict(doc), live, 10, only="/topics")
    assert any("401" in f for f in got.found), got.found


def test_stateful_sequences_follow_the_documents_links(live: str) -> None:
    """schemathesis's state machine: create a subscription, then call what the document's
    links lead to with its id (ack, seek, pause, members' heartbeats and acks, close, ...)
    in generated orders; every answer as documented, never a 500."""
    schema = schemathesis.openapi.from_url(f"{live}/openapi.json").exclude(path_regex="/stream$")
    steps: Counter[str] = Counter()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            # known topic: the link targets need a subscription that exists
            if isinstance(case.body, dict) and "topic" in case.body:
                case.body["topic"] = KNOWN_TOPIC
                case.body.pop("id", None)
            return {"headers": {"Authorization": f"Bearer {OPERATOR}"}, "timeout": 10}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            steps[f"{case.method} {case.path} {response.status_code}"] += 1
            case.validate_response(response, checks=CHECKS)

    Workflow.run(
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=8,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    print("\n".join(f"{k}: {n}" for k, n in sorted(steps.items())))
    linked = {k for k in steps if "{id}" in k and k.endswith((" 200", " 201"))}
    assert len(linked) >= 6, steps  # the links took it to many operations on live ids


def test_metrics_count_what_the_gateway_served(live: str) -> None:
    """``/metrics`` of the gateway process: Prometheus text that moves with what it serves
    (reventless's instruments record from the first scrape on)."""
    op = {"Authorization": f"Bearer {OPERATOR}"}

    def families() -> dict[str, float]:
        r = httpx.get(f"{live}/metrics", headers=op)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/plain")
        return {
            f"{s.name}{sorted(s.labels.items())}": s.value
            for fam in text_string_to_metric_families(r.text)
            for s in fam.samples
            if fam.name != "target_info"
        }

    before = families()
    sub = httpx.post(f"{live}/subscriptions", json={"topic": KNOWN_TOPIC}, headers=op).json()
    with httpx.stream("GET", f"{live}/subscriptions/{sub['id']}/stream", headers=op) as s:
        for line in s.iter_lines():
            if line == "id: 3":
                break
    after = families()
    assert after != before, after
