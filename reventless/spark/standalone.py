"""A Spark standalone cluster on loopback, from the jars PySpark ships (tests, benchmarks).

Example::

    with LocalCluster(workers=2) as cluster:
        report = await rv.spark.rebuild(model, app, master=cluster.master)
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from ..errors import ReventlessError

#: The daemons' JVM options: the C1 compiler alone and the serial collector. A loopback
#: cluster's master and workers do little once up, and C2's and the parallel collector's
#: threads would take the small machine's cores from the executors: with them, a cluster
#: of two workers came up in 5.5-5.9 s instead of 9.7-10.4 s, its daemons using 10.6-10.7 s
#: of CPU instead of 19.1-19.6 s (ad hoc, two alternating runs each). The executors' own
#: options are the application's (``spark.executor.extraJavaOptions``).
DAEMON_JAVA_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """One master and ``workers`` workers (``cores`` each) as child JVM processes.

    ``pythonpath`` is put on the workers' ``PYTHONPATH`` so executors import the
    handlers' modules (on a real cluster: install the application there).
    ``java_options``: the master's and workers' JVM options (``DAEMON_JAVA_OPTIONS``)."""

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        workdir: str | Path = ".reventless/cluster",
        pythonpath: str | None = None,
        java_options: Sequence[str] = DAEMON_JAVA_OPTIONS,
    ) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.workers, self.cores, self.memory = workers, cores, memory
        self.workdir = Path(workdir)
        self.pythonpath = pythonpath
        self.java_options = tuple(java_options)
        self.port, self.ui = _free_port(), _free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def _java(self, name: str, *args: str) -> None:
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1")
        # The executor launcher looks for a build directory unless it is told the Scala
        # version (PySpark's package has no RELEASE file): read it off spark-core's jar.
        core = next(self.home.glob("jars/spark-core_*.jar"), None)
        if core is not None:
            env.setdefault("SPARK_SCALA_VERSION", core.name.split("_")[1].split("-")[0])
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [self.pythonpath, env.get("PYTHONPATH")])
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"{name}.log").open("wb")
        self._logs.append(log)
        cmd = ["java", "-Xmx512m", *self.java_options, "-cp", str(self.home / "jars" / "*"), *args]
        self._procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))

    def alive_workers(self) -> int:
        """Workers registered with the master (0 while it starts)."""
        self.ui = self._bound_ui() or self.ui
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except (OSError, ValueError):  # not up yet, or not the master's page
            return 0

    def _bound_ui(self) -> int | None:
        """The port the master's web UI bound, from its log: when the port chosen for it
        was taken meanwhile, Spark binds the next free one instead."""
        try:
            text = (self.workdir / "master.log").read_text(errors="replace")
        except OSError:
            return None
        found = re.search(r"Bound MasterWebUI to [^,]+, and started at http://[^:/]+:(\d+)", text)
        return int(found.group(1)) if found else None

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start the JVMs and wait until every worker has registered."""
        self._java(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui)),
        )
        for i in range(self.workers):
            self._java(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory),
                *("--webui-port", str(_free_port()), "--work-dir", str(self.workdir / f"w{i}")),
                self.master,
            )
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._procs):
                self.stop()
                raise ReventlessError(
                    f"the standalone cluster did not start (logs: {self.workdir})"
                )
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        """Stop workers, then the master."""
        for p in reversed(self._procs):
            p.terminate()
        for p in reversed(self._procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self._procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
