"""A session's fleet-store rows (:class:`hwregress.store.session_rows.SessionRows`) from the history rows it wrote
(:mod:`hwregress.store.history_row`): what ``python -m hwregress store import`` does with a history folder. Pure.

A history row keeps a throughput's median and quartiles, not its samples: each becomes a ``throughput`` figure
without samples. The session's host is the one a push of its ``results.json`` names
(:func:`hwregress.store.session_rows.stable_host_id`): its GPUs' UUIDs where the rows' identities name them, else the
machine id its rows carry, else the hostname its name starts with (``<host>-<pid>-<start>``; rows written before they
carried the machine id: the push may file it under the machine's stable id, :mod:`hwregress.store.host_identity`),
else ``unknown``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hwregress.store.history import parse_time
from hwregress.store.history_row import HistoryRow
from hwregress.store.session_rows import SessionRows, session_uuid, stable_host_id

_SESSION_NAME = re.compile(r"^(?P<host>.+)-\d+-\d{8}T\d{6}Z$")


def rows_from_history(rows: Sequence[HistoryRow]) -> SessionRows:
    """The rows of one session from its history rows (all of one ``session``; at least one).

    Raises:
        ValueError: no rows, rows of several sessions, or a ``time`` that is not ISO 8601.
    """
    names = {row["session"] for row in rows}
    if len(names) != 1:
        raise ValueError(f"history rows of {len(names)} sessions given, one expected")
    name, first = names.pop(), rows[0]
    started = parse_time(first["time"])
    if started is None:
        raise ValueError(f"session {name}: time {first['time']!r} is not ISO 8601")
    match = _SESSION_NAME.match(name)
    hostname = match["host"] if match else None
    gpus = [str(row["identity"]["gpu_uuid"]) for row in rows if (row.get("identity") or {}).get("gpu_uuid")]
    machine_id = next((row["machine_id"] for row in rows if row.get("machine_id")), None)
    host_id = stable_host_id(gpus, machine_id, hostname)
    keys = [row["hardware_key"] for row in rows if not str(row.get("device") or "cpu").startswith("cpu")]
    hardware_key = max(set(keys), key=keys.count) if keys else first["hardware_key"]
    interrupted = any(row.get("interrupted") is True for row in rows)
    environment = {str(row.get("device")): dict(row["environment"]) for row in rows if row.get("environment")}
    host = {"host_id": host_id, "aliases": [hostname] if hostname else [], "hardware_key": hardware_key,
            "first_seen": started, "last_seen": started}
    session = {"id": session_uuid(name, started), "name": name, "host_id": host_id, "hostname": hostname,
               "hardware_key": hardware_key, "started_at": started, "finished_at": None, "exitstatus": None,
               "interrupted": interrupted, "git_sha": None, "git_branch": None, "ci_build_url": None,
               "environment": environment,
               "meta": {"session": name, "started_at": first["time"], "imported_from": "history",
                        **({"machine_id": machine_id} if machine_id else {})}}
    latest = {row["test_id"]: row for row in rows}  # a test twice in one session (a re-run): its last row counts
    return SessionRows(host, session, [_figure(row) for row in latest.values()])


def _figure(row: HistoryRow) -> dict[str, Any]:
    return {
        "test_id": row["test_id"], "hardware_key": row["hardware_key"], "device_name": row.get("device_name"),
        "family": row.get("family"), "model": row.get("model"), "mode": row.get("mode"),
        "batch_size": row.get("batch_size"), "dtype": row.get("dtype"), "device": row.get("device"),
        "metric": "throughput", "unit": row.get("unit"), "direction": "higher", "samples": None,
        "median": row["median"], "q1": row.get("q1"), "q3": row.get("q3"), "n": row.get("n"),
        "verdict": row.get("verdict"), "ratio": row.get("ratio"), "threshold": row.get("threshold"),
        "mds": row.get("mds"), "p_value": None, "baseline_median": row.get("baseline_median"),
        "baseline_recorded_at": row.get("baseline_recorded_at"), "identity": dict(row.get("identity") or {}),
        "diagnosis": list(row.get("diagnosis") or []),
    }
