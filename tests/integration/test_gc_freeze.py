"""An App freezes what exists at its first start (``AppOptions.gc_freeze``) before its
collectors start, so the catch-up of a backlog at start-up does not scan the modules'
objects in every full collection (a fifth of a read model's catch-up time)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys
    import reventless as rv
    from tests.model import Counter, Increment, Incremented

    async def main(url):
        writer = rv.App(store=url, options=rv.AppOptions(gc_freeze=False))
        log = writer.event_log(Counter)
        async with writer:
            await log.execute("c", Increment())
        assert gc.get_freeze_count() == 0
        seen = []
        effect = rv.SideEffectHandler("frozen")

        @effect.on(Incremented)
        def _(ev):
            seen.append(gc.get_freeze_count())

        app = rv.App(store=url)
        app.event_log(Counter)
        app.collect(effect)
        async with app:  # the backlog is caught up inside start
            assert seen, "caught up in start"
            await app.settle()
        print(seen[0])

    asyncio.run(main(sys.argv[1]))
    """
)


def printed(script: str, tmp_path: Path) -> int:
    """The number ``script`` prints, run in a process of its own on a SQLite file."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script, url],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_the_catch_up_at_start_runs_with_the_startup_objects_frozen(tmp_path: Path) -> None:
    assert printed(SCRIPT, tmp_path) > 10_000  # the modules' objects, frozen before it


DROPPED = textwrap.dedent(
    """
    import asyncio, gc, sys
    import reventless as rv
    from tests.model import Counter, Increment

    async def main(url):
        app = rv.App(store=url)  # the process's first App: frozen at its start
        log = app.event_log(Counter)
        async with app:
            await log.execute_many((f"c-{i}", Increment()) for i in range(2000))
            assert len(log._cache) == 2000  # cached while it runs
        assert gc.get_freeze_count() > 10_000

    asyncio.run(main(sys.argv[1]))
    gc.collect()
    print(sum(1 for o in gc.get_objects() if isinstance(o, Counter)))
    """
)


def test_a_stopped_app_frozen_at_its_start_keeps_no_aggregate_state(tmp_path: Path) -> None:
    """The first App of a process is frozen with the start-up objects (its own among
    them), so the cyclic collector never frees it. Its cached aggregate states go at
    stop: none is left alive once the App is dropped."""
    assert printed(DROPPED, tmp_path) == 0


def test_the_freeze_collects_only_the_young_generations(monkeypatch: Any) -> None:
    """A full collection before the freeze walked the whole start-up heap (~90 ms with
    pyarrow and pandas loaded) to find a few dozen objects: the first start collects the
    young generations, then freezes."""
    import gc

    import reventless.app as app_module

    asked: list[tuple[Any, ...]] = []
    frozen: list[bool] = []
    monkeypatch.setattr(app_module, "_frozen", False)
    monkeypatch.setattr(gc, "collect", lambda *a: asked.append(a) or 0)
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    app_module._freeze_once()
    app_module._freeze_once()  # once per process
    assert asked == [(1,)]
    assert frozen == [True]
