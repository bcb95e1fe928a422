"""The package's public names are imported on first use (PEP 562): each resolves to its
module's object, and the type checkers' imports say the same (what a process that only
asks the command line for help imports: tests/unit/test_architecture.py)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import reventless as rv

ROOT = Path(__file__).resolve().parents[2]


def _type_checking_imports() -> dict[str, str]:
    """The names ``reventless/__init__.py`` imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse((ROOT / "reventless" / "__init__.py").read_text())
    (block,) = [
        n
        for n in tree.body
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    ]
    return {
        alias.name: "." * node.level + (node.module or "")
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_type_checkers_imports_are_the_names_homes() -> None:
    homes = rv._HOMES
    assert _type_checking_imports() == homes
    assert sorted(homes) == sorted(rv.__all__)


@pytest.mark.parametrize("name", rv.__all__)
def test_each_public_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(rv._HOMES[name], "reventless")
    assert getattr(rv, name) is getattr(module, name)
    assert name in dir(rv)


def test_submodules_are_attributes_and_unknown_names_are_attribute_errors() -> None:
    assert rv.tags.matches is importlib.import_module("reventless.tags").matches
    assert callable(rv.telemetry.configure)
    for name in ("no_such_thing", "_private", "NoSuchName", "no.such"):
        with pytest.raises(AttributeError, match=re.escape(name)):
            getattr(rv, name)
