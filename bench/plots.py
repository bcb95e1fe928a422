"""PNG plots of a bench run (matplotlib, no display needed).

- ``throughput_vs_batch``: append throughput by events per transaction, per store, one
  line per contender (rows ``seq_append``, ``batch10``, ``batch100``, ``batch1000``);
- ``rebuild_vs_events``: Spark rebuild seconds by events in the log, from the points
  ``python -m bench.spark`` saved (``bench/results/spark.json``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .workloads import SYSTEMS

Results = dict[str, dict[str, list[float]]]

#: events per transaction -> the workload row measuring it
BATCH_ROWS = {1: "seq_append", 10: "batch10", 100: "batch100", 1000: "batch1000"}
STORE_TITLE = {"sqlite": "SQLite file (WAL, synchronous=FULL)", "postgres": "PostgreSQL"}
RAW_NAME = {"sqlite": "raw sqlite3", "postgres": "raw psycopg executemany"}


def throughput_vs_batch(results: dict[str, Results], out: Path) -> Path | None:
    """One panel per store: median events/s (min-max as error bars) by events per tx."""
    stores = [s for s in results if any(k in results[s] for k in BATCH_ROWS.values())]
    if not stores:
        return None
    fig, axes = plt.subplots(1, len(stores), figsize=(6.2 * len(stores), 4.4), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        for system in SYSTEMS:
            xs, ys, lo, hi = [], [], [], []
            for per, key in BATCH_ROWS.items():
                values = results[store].get(key, {}).get(system) or []
                if not values:
                    continue
                med = statistics.median(values)
                xs.append(per)
                ys.append(med)
                lo.append(med - min(values))
                hi.append(max(values) - med)
            if xs:
                label = RAW_NAME[store] if system == "raw" else system
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
        title = STORE_TITLE.get(store, store)
        _style(ax, "events per transaction", "events/s (median, min-max)", title)
    return _save(fig, out)


def rebuild_vs_events(points_file: Path, out: Path) -> Path | None:
    """Seconds to rebuild a read model by events in the log, one line per mode.

    ``points_file`` holds ``{"<mode>": [[events, seconds], ...], ...}``."""
    try:
        series: dict[str, list[list[float]]] = json.loads(points_file.read_text())
    except (OSError, ValueError):
        return None
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.2, 4.4))
    for mode, pts in series.items():
        pts = sorted(pts)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
    _style(ax, "events in the log", "rebuild seconds", "Spark rebuild of a read model")
    return _save(fig, out)


def _style(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def _save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
