"""The AsyncAPI validator: ``node tests/docs/validate_asyncapi.cjs FILE`` runs the real
AsyncAPI parser (``@asyncapi/parser`` from the npm registry, installed by
``bash infra/local/asyncapi.sh`` into ``.reventless/node/``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("validate_asyncapi.cjs")
PARSER = ROOT / ".reventless" / "node" / "node_modules" / "@asyncapi" / "parser"


@dataclass(frozen=True)
class Verdict:
    """What the parser said of a document."""

    valid: bool
    diagnostics: list[dict[str, str]]

    def errors(self) -> list[dict[str, str]]:
        return [d for d in self.diagnostics if d["severity"] == "error"]


Validate = Callable[..., list[Verdict]]


@pytest.fixture(scope="session")
def validate(tmp_path_factory: pytest.TempPathFactory) -> Validate:
    """Validate documents (dicts) with the AsyncAPI parser, in one node process; missing
    node or parser skips (fails under CI=true)."""
    node = shutil.which("node")
    if node is None:
        unavailable("node is missing (apt-get install nodejs npm)")
    if not PARSER.is_dir():
        unavailable("@asyncapi/parser is missing: run bash infra/local/asyncapi.sh")
    folder = tmp_path_factory.mktemp("asyncapi")

    def run(*docs: dict[str, Any]) -> list[Verdict]:
        paths = []
        for i, doc in enumerate(docs):
            paths.append(folder / f"asyncapi-{i}.json")
            paths[-1].write_text(json.dumps(doc))
        proc = subprocess.run(
            [node, str(SCRIPT), *map(str, paths)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode in (0, 1), f"validator failed: {proc.stderr}"
        out = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [o["file"] for o in out] == list(map(str, paths))
        assert all(o["valid"] for o in out) == (proc.returncode == 0)
        return [Verdict(o["valid"], o["diagnostics"]) for o in out]

    return run
