"""The architecture the README describes holds in the code: no import cycles among the
modules of the core or the adapters, no SQL outside ``reventless/store/``, no sqlglot
imported with the package, and no store imported by the command line's help.

The layer contracts themselves are import-linter's (``make lint``, ``[tool.importlinter]``
in pyproject.toml); these checks cover what its contracts do not say.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reventless", "reventless_nats", "reventless_aws")
#: Calls that run SQL on a SQLAlchemy connection or a DBAPI cursor (``execute`` only on a
#: connection or cursor: ``EventLog.execute`` runs commands).
SQL_CALLS = {"exec_driver_sql", "executemany", "insert_ignore", "copy"}
CONNECTIONS = {"conn", "connection", "cur", "cursor"}
#: What a process that does not open a store should not import.
HEAVY = ("sqlalchemy", "pyarrow", "numpy", "sqlglot")


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), package inits left out:
    importing a package's own re-exports is not a dependency between its modules."""
    modules = sorted(m for m in graph.find_descendants(package) if not graph.find_children(m))
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles_among_modules(package: str) -> None:
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    assert _cycles(graph, package) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(m)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert _cycles(graph, "pkg") == [["pkg.a", "pkg.b"]]


def _sql_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (
            node.func.attr in SQL_CALLS
            or (
                node.func.attr == "execute"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in CONNECTIONS
            )
        )
    ]


def test_only_the_store_runs_sql() -> None:
    sources = [
        *ROOT.glob("reventless/**/*.py"),
        *ROOT.glob("adapters/*/reventless_*/**/*.py"),
    ]
    outside = [
        p
        for p in sources
        if "store" not in p.relative_to(ROOT).parts and "testing" not in p.relative_to(ROOT).parts
    ]
    assert len(outside) > 50
    found = [f"{p.relative_to(ROOT)}:{n}" for p in outside for n in _sql_calls(p)]
    assert found == []


def test_importing_the_package_leaves_what_only_some_processes_need() -> None:
    """A new process that imports the package (a CLI run, a worker) does not pay for
    sqlglot: it is imported on the first parse of a predicate (``predicate/_sql.py``)."""
    probe = (
        "import sys, reventless\n"
        "assert 'sqlglot' not in sys.modules, 'sqlglot imported with the package'\n"
        "from reventless.predicate import Predicate\n"
        "assert 'sqlglot' not in sys.modules, 'sqlglot imported with reventless.predicate'\n"
        "from tests.model import Counter\n"
        "import reventless as rv\n"
        "Predicate.parse('by > 1', rv.App().event_log(Counter).schema)\n"
        "assert 'sqlglot' in sys.modules\n"
    )
    _in_a_new_process(probe)


def test_help_and_usage_errors_import_no_store() -> None:
    """``reventless --help``, a command's help and a usage error (what a shell completion
    and a typo run) leave SQLAlchemy, pyarrow, numpy and sqlglot (``HEAVY``) unimported;
    ``import reventless`` alone imports none of them either."""
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
    _in_a_new_process(probe)


def _in_a_new_process(probe: str) -> None:
    """Run ``probe`` (Python source whose asserts are the checks) in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
