"""The master URL forms Spark accepts, checked when the session is configured: a URL Spark refuses otherwise
surfaces only when the first spark test starts the JVM, behind PySpark's ``JAVA_GATEWAY_EXITED``.

The forms are Spark's own. ``spark-submit`` (``SparkSubmit.prepareSubmitEnvironment``, which PySpark runs to start
its JVM) takes ``yarn`` or a master that starts with ``spark``, ``k8s`` or ``local`` (Spark 3 also ``mesos``;
Spark 4.0 removed Mesos). ``SparkContext.createTaskScheduler`` then matches, whole-string, ``local``,
``local[N]`` / ``local[*]`` (N >= 1: "Asked to run locally with 0 threads"), ``local[N,F]`` (F task failures
allowed), ``local-cluster[N,C,M]`` (workers, cores, MiB each), ``spark://...`` (split at commas into
``spark://HOST:PORT`` masters, each parsed by ``Utils.extractHostPortFromSparkUrl``: a host and a port, no path,
query, fragment or user) and hands any other URL to a cluster manager that claims it: YARN claims ``yarn``,
Kubernetes ``k8s://`` (``Utils.checkAndGetK8sMasterUrl``: an ``http`` or ``https`` API server, https when no
scheme is given).
"""

from __future__ import annotations

import importlib.metadata
import re
from urllib.parse import urlsplit

ACCEPTED = ("local, local[N], local[*], local[N,F], local-cluster[N,C,M], spark://HOST:PORT[,HOST:PORT...], yarn "
            "or k8s://[https://]HOST[:PORT]")
# re.ASCII: \s is Java's whitespace class there, not every Unicode space
_LOCAL_N = re.compile(r"local\[([0-9]+|\*)\]", re.ASCII)
_LOCAL_N_FAILURES = re.compile(r"local\[([0-9]+|\*)\s*,\s*([0-9]+)\]", re.ASCII)
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]", re.ASCII)
# each local form and how many of its leading numbers must be >= 1 (local[N,F] may allow 0 task failures)
_LOCAL_FORMS = ((_LOCAL_N, 1), (_LOCAL_N_FAILURES, 1), (_LOCAL_CLUSTER, 3))


def installed_spark_major() -> int | None:
    """The major version of the installed PySpark (``4`` for 4.0.1), None when it is not installed."""
    try:
        return int(importlib.metadata.version("pyspark").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def problem(master: str, spark_major: int | None = None) -> str | None:
    """Why Spark would refuse ``master``, in a few words; None when it takes the form (whether the cluster answers is
    known only when a session starts). ``spark_major``: the installed Spark's major version (Mesos only before 4);
    None accepts the forms of either."""
    if master in ("local", "yarn"):
        return None
    for pattern, counts in _LOCAL_FORMS:
        match = pattern.fullmatch(master)
        if match:
            zero = any(count != "*" and int(count) == 0 for count in match.groups()[:counts])
            return "it asks for 0 threads, workers, cores or MiB" if zero else None
    for scheme, check in (("spark://", _standalone), ("k8s://", _kubernetes), ("mesos://", _mesos)):
        if master.startswith(scheme):
            return check(master.removeprefix(scheme), spark_major)
    return "not one of its forms"


def _standalone(addresses: str, _spark_major: int | None) -> str | None:
    listed = addresses.split(",")
    while len(listed) > 1 and not listed[-1]:
        listed.pop()  # Java's String.split, which Spark splits with, drops trailing empty strings
    for address in listed:
        try:
            parts = urlsplit(f"spark://{address}")
            port = parts.port
        except ValueError:
            return f"spark://{address} has no valid port"
        if not parts.hostname or port is None or parts.path or parts.query or parts.fragment or parts.username:
            return f"spark://{address} is not spark://HOST:PORT"
    return None


def _kubernetes(server: str, _spark_major: int | None) -> str | None:
    if not server:
        return "k8s:// names no API server"
    scheme, sep, rest = server.partition("://")
    if sep and (scheme.lower() not in ("http", "https") or not rest):
        return f"the Kubernetes API server must be http:// or https://, not {scheme}://"
    return None


def _mesos(address: str, spark_major: int | None) -> str | None:
    if spark_major is not None and spark_major >= 4:
        return f"Spark {spark_major} has no Mesos support (removed in 4.0)"
    return None if address else "mesos:// names no master"


def local_slots(master: str, cores: int) -> int | None:
    """Task slots an embedded master runs on this host, each task in a Python worker of its own: ``local`` 1,
    ``local[N]`` and ``local[N,F]`` N, ``local[*]`` ``cores`` (Spark's ``localCpuCount``: the JVM's available
    processors), ``local-cluster[N,C,M]`` N workers x C cores; None for a cluster master (``spark://``, ``yarn``,
    ``k8s://``, ``mesos://``), whose executors Spark's resource scheduling places. ``master`` is taken to be a form
    :func:`problem` accepts."""
    if master == "local":
        return 1
    for pattern in (_LOCAL_N, _LOCAL_N_FAILURES):
        match = pattern.fullmatch(master)
        if match:
            return cores if match.group(1) == "*" else int(match.group(1))
    match = _LOCAL_CLUSTER.fullmatch(master)
    if match:
        return int(match.group(1)) * int(match.group(2))
    return None
