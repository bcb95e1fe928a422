"""pyarrow without the cost of importing pandas in a process that does not use it.

``pa.array`` asks, on its first call in a process with numpy, whether pandas is
installed, by importing it (to tell a pandas object from other sequences): about 0.3 s of
CPU and 40 MB in a process that never touches pandas, which ``pyspark[sql]`` (the
``spark`` extra) installs. ``probe_without_pandas`` makes that first call with pandas
hidden from this thread, so pyarrow records it as absent; and it repairs pyarrow's
record as soon as anything imports pandas (pyarrow's own ``pd`` accessor then sets its
pandas support up), so a pandas object handed to pyarrow is recognised as one, as it
would have been: before pandas is imported, there can be none.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import pyarrow as pa

_lock = threading.Lock()
_probed = False


class _Hide(importlib.abc.MetaPathFinder):
    """pandas is not there, for one thread (the probe's)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if threading.get_ident() == self.thread and name.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class _Repairing(importlib.abc.Loader):
    """pandas' own loader, and after it has run, pyarrow's pandas support set up."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _repair()

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, get_source, ...
        return getattr(self._loader, name)


class _Watch(importlib.abc.MetaPathFinder):
    """Until pandas is imported: its spec found by the finders after this one, with its
    loader wrapped in ``_Repairing``; then this finder leaves ``sys.meta_path``."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != "pandas":
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Repairing(spec.loader)
                return spec  # type: ignore[no-any-return]
        return None


def _repair() -> None:
    """pyarrow's pandas support, now that pandas is imported (its ``pd`` accessor tries
    the import again after a failed probe)."""
    # (ImportError: a pandas release pyarrow does not support, as pyarrow would have it)
    with contextlib.suppress(ImportError):
        pa.lib._pandas_api.pd  # noqa: B018, SLF001  # pyarrow's one handle on it


def probe_without_pandas() -> None:
    """Make pyarrow's pandas probe now, with pandas hidden (once per process; nothing if
    pandas is imported already: then the probe costs nothing)."""
    global _probed
    with _lock:
        if _probed:
            return
        _probed = True
        if "pandas" in sys.modules:
            return
        hide = _Hide()
        sys.meta_path.insert(0, hide)
        try:
            pa.array([0], pa.int64())  # the probe: pyarrow records pandas as absent
        finally:
            sys.meta_path.remove(hide)
        if "pandas" in sys.modules:  # another thread imported it meanwhile
            _repair()
            return
        sys.meta_path.insert(0, _Watch())
