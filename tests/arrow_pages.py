"""Test helpers for Arrow-native pages: count them, and have a SQLite file's helper
processes ready before a read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import reventless as rv
from reventless.store import arrowhelper
from reventless.store.arrowread import ArrowPages


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each page read through ``ArrowPages`` from now on (-1: a page that
    came as rows)."""
    pages: list[int] = []
    page = ArrowPages.page

    def counted(self: ArrowPages, sql: str, rows: int, *more: Any) -> Any:
        out = page(self, sql, rows, *more)
        pages.append(-1 if out is None else out.num_rows)
        return out

    monkeypatch.setattr(ArrowPages, "page", counted)
    return pages


async def helpers_ready(app: rv.App) -> None:
    """A SQLite file's Arrow helper processes started and ready (until then, and for reads
    shorter than ``arrowhelper.SPAWN_AT`` rows, its pages come as rows)."""
    pool = app.store._arrow._helpers  # type: ignore[attr-defined]
    if pool is None:
        return
    pool.warm()
    async with asyncio.timeout(60):
        while pool.ready() < arrowhelper.HELPERS:
            await asyncio.sleep(0.01)


def arrow_widths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The columns of each page read as Arrow from now on, a SQLite file's too: its
    helpers start for any read, and every read waits for them."""
    monkeypatch.setattr(arrowhelper, "SPAWN_AT", 1)
    monkeypatch.setattr(arrowhelper, "WAIT_AT", 1)
    widths: list[int] = []
    page = ArrowPages.page

    def spied(self: ArrowPages, sql: str, rows: int, *more: Any) -> Any:
        out = page(self, sql, rows, *more)
        if out is not None:
            widths.append(out.num_columns)
        return out

    monkeypatch.setattr(ArrowPages, "page", spied)
    return widths


def rows_only(
    self: Any,
    topic: str,
    from_offset: int,
    page_size: int,
    *,
    upto: int | None = None,
    columns: Any = None,
) -> Any:
    """A store's ``stream_columns`` that reads every page as SQL rows (set on its class:
    the batches are then built from rows, as without the Arrow reader)."""
    return self.stream(topic, from_offset, page_size, upto=upto)
