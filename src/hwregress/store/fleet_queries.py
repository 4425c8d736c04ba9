"""What the fleet store says about a hardware key's hosts: each host's latest median per test, the fleet a new host of
that key is judged against on its first day (:mod:`hwregress.judge.day_one`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hwregress.store.fleet_store import Store

# the verdicts of figures that measured the machine: a failed, oom, skipped or invalid test's figure says nothing
MEASURED_VERDICTS = frozenset({"pass", "improvement", "regression", "new", "unstable", "env-changed",
                               "other-hardware"})


def latest_medians(store: Store, hardware_key: str, metric: str = "throughput") -> dict[str, dict[str, float]]:
    """``{test_id: {host_id: median}}`` over the sessions of ``hardware_key`` in ``store``: each host's median of
    ``metric`` (the figure's unit, e.g. samples/s) from its latest session that measured the test, interrupted
    sessions and unmeasured figures left out.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    # every session, not those filed under the key: a GPU session's CPU figures are filed under the GPU's key
    sessions = {s["id"]: s for s in store.sessions() if not s.get("interrupted")}
    latest: dict[tuple[str, str], tuple[Any, float]] = {}
    for figure in store.figures(hardware_key=hardware_key):
        session = sessions.get(figure["session_id"])
        if session is None or not _measured(figure, metric):
            continue
        key = (figure["test_id"], session["host_id"])
        if key not in latest or session["started_at"] > latest[key][0]:
            latest[key] = (session["started_at"], float(figure["median"]))
    out: dict[str, dict[str, float]] = {}
    for (test_id, host), (_, median) in latest.items():
        out.setdefault(test_id, {})[host] = median
    return out


def _measured(figure: Mapping[str, Any], metric: str) -> bool:
    median = figure.get("median")
    return (figure.get("metric") == metric and isinstance(median, (int, float)) and median > 0
            and figure.get("verdict") in MEASURED_VERDICTS)


def hardware_keys(store: Store) -> list[str]:
    """The hardware keys of the sessions in ``store``, sorted.

    Raises:
        StoreUnavailable: the store cannot be read.
    """
    return sorted({str(s["hardware_key"]) for s in store.sessions() if s.get("hardware_key")})
