"""What the fleet store says about a hardware key's hosts: each host's latest median per test, the fleet a new host of
that key is judged against on its first day (:mod:`hwregress.judge.day_one`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from hwregress.store.fleet_store import Store

# the verdicts of figures that measured the machine: a failed, oom, skipped or invalid test's figure says nothing
MEASURED_VERDICTS = frozenset({"pass", "improvement", "regression", "new", "unstable", "env-changed",
                               "other-hardware"})


def latest_medians(store: Store, hardware_key: str, metric: str = "throughput") -> dict[str, dict[str, float]]:
    """``{test_id: {host_id: median}}`` over the figures of ``hardware_key`` in ``store``: each host's median of
    ``metric`` (the figure's unit, e.g. samples/s) from its latest session that measured the test
    (:func:`latest_figures`), interrupted sessions left out.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    # every session, not those filed under the key: a GPU session's CPU figures are filed under the GPU's key
    sessions = {s["id"]: s for s in store.sessions() if not s.get("interrupted")}
    latest = latest_figures(sessions, store.figures(hardware_key=hardware_key), (metric,))
    return {test_id: {host: float(figure["median"]) for host, (figure, _) in hosts.items()}
            for (_, test_id), hosts in latest.items()}


Latest = dict[tuple[str, str], dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]]


def latest_figures(sessions: Mapping[Any, Mapping[str, Any]], figures: Iterable[Mapping[str, Any]],
                   metrics: Collection[str]) -> Latest:
    """``(metric, test id) -> host id -> (figure, session)`` of each host's latest session (by start, then name) with
    a measured figure of the test: one of ``metrics``, in a session of ``sessions`` (id -> ``sessions`` row), a
    positive finite median, a verdict of :data:`MEASURED_VERDICTS` (or none recorded)."""
    out: Latest = {}
    for figure in figures:
        session = sessions.get(figure["session_id"])
        if session is None or figure.get("metric") not in metrics or not measured(figure):
            continue
        hosts = out.setdefault((figure["metric"], figure["test_id"]), {})
        held = hosts.get(session["host_id"])
        if held is None or (held[1]["started_at"], held[1]["name"]) < (session["started_at"], session["name"]):
            hosts[session["host_id"]] = (figure, session)
    return out


def measured(figure: Mapping[str, Any]) -> bool:
    """Whether a figure row measured the machine: a positive finite median, of a test that was measured."""
    median = figure.get("median")
    return (isinstance(median, (int, float)) and not isinstance(median, bool) and math.isfinite(median)
            and median > 0 and figure.get("verdict") in (*MEASURED_VERDICTS, None))


def host_names(store: Store) -> dict[str, set[str]]:
    """``{host_id: names}``: every hostname and machine id the sessions of each host recorded (a GPU host's id is its
    GPUs' UUIDs, which its CPU tests do not carry: by these names a session knows its own host in the store).

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    names: dict[str, set[str]] = {}
    for session in store.sessions():
        known = names.setdefault(str(session["host_id"]), set())
        meta = session.get("meta") if isinstance(session.get("meta"), Mapping) else {}
        known.update(str(v) for v in (session.get("hostname"), meta.get("machine_id")) if v)
    return names


def hardware_keys(store: Store) -> list[str]:
    """The hardware keys of the sessions in ``store``, sorted.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    return sorted({str(s["hardware_key"]) for s in store.sessions() if s.get("hardware_key")})
