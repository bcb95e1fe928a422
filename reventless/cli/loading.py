"""``--app`` and the read model: ``module:attribute`` imported from the current directory,
as uvicorn and celery do; a factory gets ``--store``.

Example::

    app = load_app("examples.shop.model:app", store="sqlite:///shop.db")
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import TYPE_CHECKING, Any

from .run import UsageError

if TYPE_CHECKING:
    from ..app import App

#: What ``--app`` names (the help and the README say it in these words).
FACTORY_RULE = (
    "--app module:attr names an App or a function returning one; "
    "with --store URL the function is called as attr(store=URL)"
)


def import_attr(spec: str, what: str) -> Any:
    """``module:attribute``, the module imported with the current directory on the path."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"{what} must be module:attribute, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{what} {spec}: cannot import {module_name}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{what} {spec}: module {module_name} has no {attr!r}") from None


def kind(obj: object) -> str:
    """``the class X`` or ``a X``, for an error naming what was found instead."""
    return f"the class {obj.__name__}" if isinstance(obj, type) else f"a {type(obj).__name__}"


def load_app(spec: str, store: str | None = None) -> App:
    """The App ``spec`` names, or the one its factory returns (``FACTORY_RULE``)."""
    from ..app import App

    obj = import_attr(spec, "--app")
    if isinstance(obj, App):
        if store is not None:
            raise UsageError(f"--app {spec} is an App, not a factory: --store needs a factory")
        return obj
    if not callable(obj):
        raise UsageError(f"--app {spec} is {kind(obj)}, not an App or a factory")
    kwargs = {} if store is None else {"store": store}
    try:
        inspect.signature(obj).bind(**kwargs)
    except TypeError:
        wanted = "a store keyword (store=URL)" if store is not None else "no arguments"
        raise UsageError(f"--app {spec}: the factory must accept {wanted}") from None
    except ValueError:  # no signature to check (a builtin): the call will tell
        pass
    app = obj(**kwargs)
    if not isinstance(app, App):
        raise UsageError(f"--app {spec} returned {kind(app)}, not an App")
    return app
