"""Without the OpenTelemetry API (the otel extra not installed) every hook is a no-op:
commands, the relay and collectors run as before, events store no trace context."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the package were not installed
import reventless as rv
from reventless import telemetry
from tests.telemetry.model import Counter, Increment, Ledger, chain_app

assert not telemetry.available() and not telemetry.tracing()
assert telemetry.setup_from_env({"OTEL_TRACES_EXPORTER": "otlp"}) == (None, None)
telemetry.configure()

async def main():
    app = chain_app(sys.argv[1])
    async with app:
        await app.event_log(Counter).execute("c-1", Increment(by=2))
        await app.settle()
        [noted] = await app.event_log(Ledger).read()
        assert noted.trace is None and noted.event.n == 2
    with telemetry.span("x") as s:
        assert s is None
    body, ctype = telemetry.prometheus_text()
    assert body.startswith(b"# reventless: metrics need") and ctype.startswith("text/plain")
    print("ok")

asyncio.run(main())
"""


def test_everything_runs_without_the_opentelemetry_api(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path / 'a.db'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert "ModuleNotFoundError" not in out.stderr
