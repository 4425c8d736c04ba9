"""History rows (:mod:`hwregress.store.history_row`) from the fleet store's rows: what
:meth:`hwregress.store.fleet_store.Store.export_history` writes, so that ``python -m hwregress history`` and its
dashboard read a store's sessions as they read a runner's own history. Pure: no database, no file.

A throughput figure with its samples becomes the row :func:`hwregress.store.history_row.row_from_record` builds from
the record it came from; one imported from a history (median and quartiles, no samples) gets those back. What the
store does not keep is left out of the rows: the window's telemetry and health means, and the package list's hash.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from hwregress.store.figures import ReachFigures
from hwregress.store.history_row import HISTORY_ROW_VERSION, HistoryRow, row_from_record
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict, parse_verdict

KNOWN_VERDICTS = frozenset({None, *(verdict.value for verdict in Verdict)})


def history_rows(session: Mapping[str, Any], figure_rows: Sequence[Mapping[str, Any]]) -> list[HistoryRow]:
    """One history row per throughput figure of ``session`` (a ``sessions`` row) that has a hardware key and a
    median > 0, in the order given.

    Args:
        session: the session's row (``name``, ``started_at`` an aware datetime, ``interrupted``, ``environment``).
        figure_rows: its ``figures`` rows (other metrics are skipped: a history row is a throughput's; so is a
            figure whose verdict this hwregress does not know, written by a newer one into a shared store).
    """
    time = _iso(session["started_at"])
    machine = (session.get("meta") or {}).get("machine_id")
    rows = []
    for figure in figure_rows:
        if figure["metric"] != "throughput" or not figure["hardware_key"] or not (figure["median"] or 0) > 0:
            continue
        if figure["verdict"] not in KNOWN_VERDICTS:  # a newer hwregress's verdict in a shared store: not readable here
            continue
        environment = dict((session.get("environment") or {}).get(str(figure["device"]), {}))
        row = row_from_record(_record(figure, environment), session["name"], time, "", bool(session["interrupted"]),
                              hwregress_version=None) if figure["samples"] else _summary_row(figure, environment,
                                                                                            session, time)
        if row is not None:
            if machine:  # an export imported into another store files the session under its machine, not hostname
                row["machine_id"] = str(machine)
            rows.append(row)
    return rows


def _record(figure: Mapping[str, Any], environment: dict[str, Any]) -> TestRecord:
    """The parts of the test's record a history row is built from."""
    return TestRecord(
        test_id=figure["test_id"], family=figure["family"] or "throughput", hardware_key=figure["hardware_key"],
        device=figure["device"], device_name=figure["device_name"], model=figure["model"], mode=figure["mode"],
        batch_size=figure["batch_size"], dtype=figure["dtype"], unit=figure["unit"] or "samples/s",
        samples=list(figure["samples"]), verdict=parse_verdict(figure["verdict"] or "new"), ratio=figure["ratio"],
        threshold=figure["threshold"], baseline_throughput=figure["baseline_median"],
        baseline_recorded_at=figure["baseline_recorded_at"], identity=dict(figure["identity"] or {}),
        environment=environment, diagnosis=list(figure["diagnosis"] or []),
        reach=ReachFigures(figure="throughput", mds=figure["mds"]) if figure["mds"] is not None else None)


def _summary_row(figure: Mapping[str, Any], environment: dict[str, Any], session: Mapping[str, Any],
                 time: str) -> HistoryRow:
    """The row of a figure without samples (imported from a history): its median and quartiles as stored."""
    q1 = figure["q1"] if figure["q1"] is not None else figure["median"]
    q3 = figure["q3"] if figure["q3"] is not None else figure["median"]
    row: dict[str, Any] = {
        "v": HISTORY_ROW_VERSION, "session": session["name"], "time": time, "test_id": figure["test_id"],
        "hardware_key": figure["hardware_key"], "device": figure["device"], "device_name": figure["device_name"],
        "family": figure["family"] or "throughput", "model": figure["model"], "mode": figure["mode"],
        "batch_size": figure["batch_size"], "dtype": figure["dtype"], "identity": dict(figure["identity"] or {}),
        "environment": environment, "packages": "", "unit": figure["unit"] or "samples/s",
        "median": figure["median"], "q1": q1, "q3": q3, "iqr": q3 - q1, "n": figure["n"] or 1,
        "verdict": figure["verdict"] or "new", "ratio": figure["ratio"], "threshold": figure["threshold"],
        "baseline_median": figure["baseline_median"], "baseline_recorded_at": figure["baseline_recorded_at"],
        "telemetry": {}, "health": {}, "diagnosis": list(figure["diagnosis"] or [])[:2], "mds": figure["mds"],
    }
    if session["interrupted"]:
        row["interrupted"] = True
    return row  # type: ignore[return-value]


def _iso(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.timezone.utc).isoformat()
