"""Creating the Spark session reventless runs on (``local[*]`` by default, any master).

Example::

    spark = session()                               # local[*]
    spark = session("spark://127.0.0.1:7077")       # a standalone cluster
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ReventlessError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Where Debian's ``libpostgresql-jdbc-java`` puts the PostgreSQL JDBC driver.
DEBIAN_JDBC_JAR = "/usr/share/java/postgresql.jar"


def jdbc_jar() -> str | None:
    """The PostgreSQL JDBC driver jar (``REVENTLESS_JDBC_JAR`` or Debian's), if present."""
    path = os.environ.get("REVENTLESS_JDBC_JAR") or DEBIAN_JDBC_JAR
    return path if Path(path).is_file() else None


def default_master() -> str:
    """``REVENTLESS_SPARK_MASTER`` or ``local[*]``."""
    return os.environ.get("REVENTLESS_SPARK_MASTER") or "local[*]"


def session(
    master: str | None = None,
    *,
    app_name: str = "reventless",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's Spark session for ``master``.

    Defaults suit one machine: few shuffle partitions (``REVENTLESS_SPARK_PARTITIONS``,
    default 4; Spark's 200 are far too many here), UTC session time zone, the UI off,
    executors running this interpreter, and the PostgreSQL JDBC driver on the class path
    when it is installed. ``conf`` overrides any of them. A process has one Spark
    driver: asking for another master while a session runs raises ``ReventlessError``.
    The ``reventless`` data source is registered on it (``datasource.register``).
    """
    from pyspark.sql import SparkSession

    from .datasource import register

    master = master or default_master()
    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        if running != master:
            raise ReventlessError(
                f"a Spark session on {running!r} already runs in this process; "
                f"stop it before using {master!r}"
            )
        register(active)
        return active
    # PySpark takes the executors' interpreter from the environment when it creates the
    # context; default to this one (the one with reventless and the handlers installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings: dict[str, str] = {
        "spark.sql.shuffle.partitions": os.environ.get("REVENTLESS_SPARK_PARTITIONS", "4"),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
        "spark.pyspark.driver.python": sys.executable,
    }
    local_ip = os.environ.get("SPARK_LOCAL_IP")
    if local_ip:
        settings["spark.driver.host"] = local_ip
        settings["spark.driver.bindAddress"] = local_ip
    jar = jdbc_jar()
    if jar:
        settings["spark.jars"] = jar
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("REVENTLESS_SPARK_LOG", "ERROR"))
    register(spark)
    return spark
