"""A standalone Spark cluster on 127.0.0.1 for the self-tests: one master and one worker, started with the launcher
that ships with pyspark (``bin/spark-class``, what ``sbin/start-master.sh`` and ``start-worker.sh`` run), each in
its own process group, their logs and work folders in a temporary folder; stopped (SIGTERM, then SIGKILL) on exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT_S = 90.0
# JVMs for short self-test runs, whose figures are not the point: the client compiler only (HotSpot's C2 spends more CPU
# compiling than a run of a minute gains from it) and the serial collector (no parallel GC threads on 2 cores). A stream
# of 88 images on local[2] took 123 s of CPU with the defaults and 77 s with these (2-core AMD VM, 2026-11-29)
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# the same for a session's driver and executors, as --spark-conf values
QUICK_JVM_CONF = (("spark.driver.extraJavaOptions", QUICK_JVM), ("spark.executor.extraJavaOptions", QUICK_JVM))


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class StandaloneCluster:
    """``with StandaloneCluster(folder) as cluster:`` ``cluster.url`` is ``spark://127.0.0.1:PORT``."""

    def __init__(self, folder: Path, cores: int = 2, memory: str = "1g") -> None:
        self.folder = folder
        self.cores, self.memory = cores, memory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(self.port), "--webui-port", str(free_port()))
            self._wait_for("master", "I have been elected leader")
            self._launch("worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()),
                         "--work-dir", str(self.folder / "work"), self.url)
            self._wait_for("worker", "Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        environment = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                       "SPARK_LOG_DIR": str(self.folder), "SPARK_WORKER_DIR": str(self.folder / "work"),
                       "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM}  # spark-class reads it for the master and the worker
        log = (self.folder / f"{name}.log").open("wb")
        self.processes.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args],
                                               stdout=log, stderr=subprocess.STDOUT, env=environment,
                                               start_new_session=True))

    def _wait_for(self, name: str, line: str) -> None:
        log = self.folder / f"{name}.log"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if line in log.read_text(errors="replace"):
                return
            if self.processes[-1].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"the Spark {name} did not start ({line!r} not logged); its log:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        """Stop the worker, then the master; each process group gets SIGTERM, then SIGKILL after 20 s."""
        for process in reversed(self.processes):
            _end_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _end_group(process, signal.SIGKILL)
                process.wait(timeout=20)


def _end_group(process: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
