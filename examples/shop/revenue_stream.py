"""Revenue and units per SKU per hour, live on Spark: source, filter, map, window,
aggregate, sink.

The log's ``Order`` topic is read as a stream (the ``reventless`` data source); placed
orders are kept (filter), priced (map: ``qty * unit_price``), grouped into hourly windows
of the time the order was placed (``_produced_at``, with a watermark: events later than
``LATENESS`` behind the newest are counted as late and left out) per SKU and summed.
Each micro-batch's changed windows land in the ``sku_hourly_revenue`` read model's table
in one transaction with the stream's position; the order lines also go to Parquet files
partitioned by date (the lakehouse feed).

Run it (a shop database made by ``python -m examples.shop``)::

    python -m examples.shop.revenue_stream sqlite:///shop.db

or through the CLI: ``reventless stream examples.shop.revenue_stream:sku_hours --app
examples.shop.revenue_stream:app --store sqlite:///shop.db``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

import reventless as rv
from examples.shop.model import Inventory, Order, OrderPlaced

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from reventless.spark.stream import Topics

#: How late an order may arrive (by its time) and still count in its hour.
LATENESS = "10 minutes"


class SkuHour(BaseModel):
    """One SKU's sales in one hour."""

    id: str  # "<sku>@<hour>"
    sku: str
    hour: datetime
    revenue: Decimal
    units: int


sku_hours: rv.ReadModel[SkuHour] = rv.ReadModel("sku_hourly_revenue", row=SkuHour, key="id")


def order_lines(topics: Topics) -> DataFrame:
    """Source, filter and map: one priced line per placed order, with its date."""
    from pyspark.sql import functions as F

    orders = topics["Order"]
    return (
        orders.where(F.col("_type") == OrderPlaced.event_type)
        .select(
            F.col("_offset"),
            F.col("_produced_at").alias("at"),
            F.col("sku"),
            F.col("qty"),
            (F.col("qty") * F.col("unit_price").cast("decimal(18,2)")).alias("amount"),
        )
        .withColumn("date", F.to_date("at"))
    )


def revenue(topics: Topics) -> DataFrame:
    """Window and aggregate: revenue and units per SKU per hour (a ``sku_hours`` row each)."""
    from pyspark.sql import functions as F

    hourly = (
        order_lines(topics)
        .withWatermark("at", LATENESS)
        .groupBy(F.window("at", "1 hour"), F.col("sku"))
        .agg(F.sum("amount").alias("revenue"), F.sum("qty").alias("units"))
    )
    hour = F.col("window.start")
    return hourly.select(
        F.concat_ws("@", F.col("sku"), F.date_format(hour, "yyyy-MM-dd'T'HH:mm")).alias("id"),
        F.col("sku"),
        hour.alias("hour"),
        F.col("revenue").cast("decimal(18,2)").alias("revenue"),
        F.col("units").cast("long").alias("units"),
    )


#: ``reventless stream`` finds a projection's pipeline here, by the read model's name.
PIPELINES = {sku_hours.name: revenue}


def fold(placed: Iterable[rv.Envelope[Any]]) -> dict[str, SkuHour]:
    """The same numbers in plain Python, from the log's ``OrderPlaced`` envelopes."""
    rows: dict[str, SkuHour] = {}
    for ev in placed:
        e = ev.event
        hour = ev.produced_at.replace(minute=0, second=0, microsecond=0)
        key = f"{e.sku}@{hour:%Y-%m-%dT%H:%M}"
        now = rows.get(key) or SkuHour(id=key, sku=e.sku, hour=hour, revenue=Decimal(0), units=0)
        rows[key] = now.model_copy(
            update={"revenue": now.revenue + e.qty * e.unit_price, "units": now.units + e.qty}
        )
    return rows


def app(store: str = "sqlite:///shop.db") -> rv.App:
    """The shop's logs (orders and inventory), for the stream."""
    a = rv.App(store=store)
    a.event_log(Order)
    a.event_log(Inventory)
    return a


def main(argv: list[str]) -> None:  # pragma: no cover - a long-running demo
    from reventless.spark.streamrun import start_stream

    shop = app(argv[0] if argv else "sqlite:///shop.db")
    running = start_stream(
        sku_hours,
        shop,
        revenue,
        trigger="5s",
        on_progress=lambda p: print(
            f"batch {p.batch_id}: {p.rows_in} events, {p.rows_out} rows, lag {p.lag}, "
            f"late {p.late}, {p.seconds:.2f}s"
        ),
    )
    try:
        running.query.awaitTermination()
    except KeyboardInterrupt:
        running.stop()


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
