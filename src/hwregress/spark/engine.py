"""The Spark engine of the ``spark`` family: whether it can run here (PySpark installed, a Java 17+ runtime),
the session (embedded ``local[N]`` by default, or a cluster's master URL), and what it runs on (Spark version,
master, executor layout).

PySpark 4 needs Java 17 or newer ("Spark runs on Java 17/21", Apache Spark 4.0 documentation, Overview). The
runtime PySpark starts is ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java`` on ``PATH``
(``bin/spark-class`` of the distribution), and this module looks in the same places.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MIN_JAVA = 17
INSTALL_PYSPARK = 'pip install "hwregress[spark]"'
INSTALL_JAVA = ("install a Java 17+ runtime (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: "
                "brew install openjdk@17) and put its java on PATH or point JAVA_HOME at it")
EXECUTORS_WAIT_S = 60.0  # how long a cluster's executors may take to register before the layout is read


class SparkUnavailable(RuntimeError):
    """Spark cannot run here; the message says why and how to install what is missing."""


@dataclass(frozen=True)
class EngineConfig:
    """Where the family's Spark session runs.

    Attributes:
        master: Spark master URL: ``local[N]``, ``spark://HOST:PORT``, ``yarn``, ``k8s://...``.
        conf: ``spark.*`` settings (``--spark-conf key=value``), applied in order.
    """

    master: str
    conf: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def default_master() -> str:
    """``local[N]``, N = this host's cores: one task per core, embedded in this process's JVM."""
    return f"local[{host_cores()}]"


def parse_conf(entries: Iterable[str], source: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` entries as pairs.

    Raises:
        ValueError: an entry without ``=`` or with an empty key; the message names the entry and ``source``.
    """
    pairs = []
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{source} {entry!r}: write key=value, e.g. spark.executor.memory=4g")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def java_command() -> tuple[str | None, str]:
    """The java PySpark would start, and where it came from; None when there is none.

    ``JAVA_HOME`` wins when set (as in Spark's ``bin/spark-class``), even when it points nowhere."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return (candidate if os.access(candidate, os.X_OK) else None), f"JAVA_HOME={home}"
    found = shutil.which("java")
    return found, "java on PATH"


def java_major(version_text: str) -> int | None:
    """The major version in ``java -version``'s output: ``"17.0.15"`` -> 17, ``"1.8.0_392"`` -> 8; None if absent."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def unavailable_reason() -> str | None:
    """Why Spark cannot run here (PySpark or pandas/pyarrow missing, no Java, Java too old), with the install
    command; None when it can. The Python packages are checked first."""
    return pyspark_problem() or java_problem()


def pyspark_problem() -> str | None:
    """Which of the Python packages the family needs (pandas and pyarrow for ``predict_batch_udf``'s Arrow batches,
    pyspark) cannot be imported, with the pip command; None when all can."""
    missing = []
    for module in ("pandas", "pyarrow", "pyspark"):
        try:
            importlib.import_module(module)
        except ImportError as error:
            missing.append(f"{module}: {error}")
    return f"PySpark is not installed ({'; '.join(missing)}); {INSTALL_PYSPARK}" if missing else None


def java_problem() -> str | None:
    """Why the Java runtime Spark needs cannot run here (none found, it does not start, older than
    :data:`MIN_JAVA`), with the install command; None when it can."""
    java, source = java_command()
    if java is None:
        where = f"{source} has no bin/java" if source.startswith("JAVA_HOME") else "no java on PATH and JAVA_HOME unset"
        return f"Spark needs a Java {MIN_JAVA}+ runtime: {where}; {INSTALL_JAVA}"
    try:
        probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"Spark needs a Java {MIN_JAVA}+ runtime: {java} ({source}) did not run ({error}); {INSTALL_JAVA}"
    major = java_major(probe.stderr + probe.stdout)
    if major is None or major < MIN_JAVA:
        return (f"Spark needs a Java {MIN_JAVA}+ runtime: {java} ({source}) is version {major or 'unknown'}; "
                f"{INSTALL_JAVA}")
    return None


def start_session(config: EngineConfig, app_name: str = "hwregress") -> Any:
    """A SparkSession on ``config.master`` whose Python workers run this interpreter with this process's import
    path (so they import hwregress, torch and any ``--workloads`` module).

    Raises:
        SparkUnavailable: PySpark or Java is missing, or the session did not start (the message has Spark's error).
    """
    reason = unavailable_reason()
    if reason is not None:
        raise SparkUnavailable(reason)
    from pyspark.sql import SparkSession

    # the JVM's Python workers inherit the environment: this interpreter, this import path
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import_path = os.pathsep.join(p for p in sys.path if p)
    builder = (SparkSession.builder.master(config.master).appName(app_name)
               .config("spark.pyspark.python", sys.executable)
               .config("spark.executorEnv.PYTHONPATH", import_path)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.shuffle.partitions", str(max(2, host_cores())))
               .config("spark.sql.streaming.numRecentProgressUpdates", "10000"))
    for key, value in config.conf:
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as error:  # Py4J and JVM start-up errors have no common base
        raise SparkUnavailable(f"Spark did not start on master {config.master!r}: {type(error).__name__}: "
                               f"{str(error).strip()[:1500]}") from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def describe(session: Any, expected_executors: int | None = None) -> dict[str, Any]:
    """What the session runs on: ``spark_version``, ``master``, ``app_id``, ``default_parallelism`` (the
    partitions a data set gets), ``task_cpus``, ``executors`` (one dict per executor: id, host, cores, memory in
    bytes, resources such as GPU addresses) and ``layout`` (``"2 executors x 4 cores, 1 CPU per task"``).

    On a cluster the executors register after the session starts; this waits up to :data:`EXECUTORS_WAIT_S`
    for ``expected_executors`` (or any) to appear."""
    context = session.sparkContext
    conf = context.getConf()
    executors = _executors(session, expected_executors)
    cores = sum(e["cores"] or 0 for e in executors)
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    return {
        "spark_version": session.version,
        "master": context.master,
        "app_id": context.applicationId,
        "default_parallelism": context.defaultParallelism,
        "task_cpus": task_cpus,
        "executor_memory": conf.get("spark.executor.memory", None),
        "gpu_per_executor": conf.get("spark.executor.resource.gpu.amount", None),
        "gpu_per_task": conf.get("spark.task.resource.gpu.amount", None),
        "executors": executors,
        "total_cores": cores,
        "layout": _layout(executors, task_cpus, context.defaultParallelism),
    }


def _layout(executors: list[dict[str, Any]], task_cpus: int, parallelism: int) -> str:
    """``"2 executors x 4 cores, 1 CPU per task"``; without the monitoring API, the task slots Spark reports."""
    if not executors:
        return f"{parallelism} task slots (executors not listed: the Spark UI is off), {task_cpus} CPU per task"
    cores = "/".join(sorted({str(e["cores"]) for e in executors}))
    return f"{len(executors)} executor{'s' if len(executors) != 1 else ''} x {cores} cores, {task_cpus} CPU per task"


def _executors(session: Any, expected: int | None) -> list[dict[str, Any]]:
    """The executors from Spark's monitoring REST API (``/api/v1/applications/<id>/executors``); in local mode
    the driver is the one executor."""
    context = session.sparkContext
    if not context.uiWebUrl:
        return []  # spark.ui.enabled=false: no monitoring API to ask
    local = context.master.startswith("local")
    deadline = time.monotonic() + EXECUTORS_WAIT_S
    while True:
        found = [_executor(item) for item in _rest(context, "executors")
                 if local or item.get("id") != "driver"]
        if local or len(found) >= (expected or 1) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _executor(item: dict[str, Any]) -> dict[str, Any]:
    return {"id": item.get("id"), "host": item.get("hostPort"), "cores": item.get("totalCores"),
            "memory_bytes": item.get("maxMemory"),
            "resources": {name: list(info.get("addresses", []))
                          for name, info in (item.get("resources") or {}).items()}}


def _rest(context: Any, what: str) -> list[dict[str, Any]]:
    """One listing of the application's monitoring REST API; empty when the UI is off or the call fails."""
    base = context.uiWebUrl
    if not base:
        return []
    try:
        with urllib.request.urlopen(f"{base}/api/v1/applications/{context.applicationId}/{what}", timeout=10) as answer:
            return list(json.loads(answer.read().decode()))
    except (OSError, ValueError):
        return []


def fingerprint(description: dict[str, Any]) -> dict[str, str]:
    """The environment-fingerprint entries of a Spark run: a change in any of them is named when the test is
    judged against its baseline."""
    return {"spark": str(description["spark_version"]), "spark_master": str(description["master"]),
            "spark_layout": str(description["layout"])}
