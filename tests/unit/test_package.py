"""The package's public names are imported on first use (PEP 562): each resolves to its
module's object, the type checkers' imports say the same, and a process that only asks
the command line for help imports neither SQLAlchemy nor pyarrow."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import reventless as rv

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sqlalchemy", "pyarrow", "numpy", "sqlglot")


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
    for name in ("no_such_thing", "_private", "NoSuchName"):
        with pytest.raises(AttributeError, match=name):
            getattr(rv, name)


def test_help_and_usage_errors_import_no_store() -> None:
    """``reventless --help``, a command's help and a usage error (what a shell completion
    and a typo run) leave SQLAlchemy, pyarrow and numpy unimported; ``import reventless``
    alone imports none of them either."""
    probe = (
        "import sys, contextlib, io\n"
        f"heavy = {HEAVY!r}\n"
        "import reventless\n"
        "assert not [m for m in heavy if m in sys.modules], 'import reventless'\n"
        "from reventless.cli import main\n"
        "for args in (['--help'], ['tail', '--help'], ['status', '--help'], ['tail']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()), "
        "contextlib.redirect_stderr(io.StringIO()):\n"
        "        code = main(args)\n"
        "    assert code in (0, 2), (args, code)\n"
        "    loaded = [m for m in heavy if m in sys.modules]\n"
        "    assert not loaded, (args, loaded)\n"
        "reventless.App\n"
        "assert 'sqlalchemy' in sys.modules and 'pyarrow' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
