"""Throughput benchmarks: reventless vs the ``eventsourcing`` library vs raw ``sqlite3``.

Run ``python -m bench [--quick] [--out BENCHMARKS.md]`` (needs the ``bench`` extra).
"""
