"""A streaming projection in a process of its own: the driver the kill -9 test kills.

Usage: ``python -m tests.spark.streamproc STORE_URL CHECKPOINT [MASTER]``
"""

from __future__ import annotations

import sys

import reventless as rv
from examples.shop.model import stock_levels
from tests.spark.shoplog import declare
from tests.spark.streamlog import copy_of

killed = copy_of(stock_levels, "stock_levels_killed")


def main(url: str, checkpoint: str, master: str = "local[2]") -> None:
    from reventless.spark import session
    from reventless.spark.streamrun import start_stream

    app = rv.App(store=url)
    declare(app)
    spark = session(master, conf={"spark.sql.shuffle.partitions": "2"})
    running = start_stream(
        killed, app, spark=spark, checkpoint=checkpoint, trigger="100ms", max_events_per_trigger=40
    )
    running.query.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
