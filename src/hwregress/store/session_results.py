"""A session's ``results.json`` document rebuilt from the fleet store's rows, so that ``python -m hwregress report
compare A B --store URL`` compares two stored sessions by id with the path it takes for two results files.

:func:`results_from_rows` is the inverse of :func:`hwregress.store.session_rows.session_rows` for what the store
keeps: the session's ``meta`` as it was, and per test one record with its figures (throughput and samples, latency,
peak memory, accuracy, speedup, efficiency, each with its baseline and the reach of its verdict), verdict, ratio,
threshold, p-value, identity, diagnosis and the environment of its device. Pushing the rebuilt document gives the same
session and figure rows (a self-test holds it). What the store does not keep is not there: a test with no figure (one
that failed before measuring), the window's telemetry, energy, profiles and the family's sub-records.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from hwregress.store.fleet_store import Store
from hwregress.store.metrics import BY_NAME, METRICS, JudgedMetric
from hwregress.store.results import RESULTS_SCHEMA_VERSION

CLOSEST = 3  # ids named when a session is not found
INTEGER_METRICS = ("peak_memory",)  # bytes: the record's field is an int, the figure's median a float


class SessionNotFound(LookupError):
    """No session of that name or id in the store: ``session_id`` as asked, ``closest`` the most similar names and ids
    the store holds (at most :data:`CLOSEST`, most similar first; empty when none is close)."""

    def __init__(self, session_id: str, closest: Sequence[str]) -> None:
        self.session_id, self.closest = session_id, list(closest)
        super().__init__(f"no session {session_id!r} in the store")


def session_results(store: Store, session_id: str) -> dict[str, Any]:
    """The results document (parsed JSON, as ``results.json`` holds it) of the stored session whose name
    (``meta.session``) or UUID is ``session_id``.

    Raises:
        SessionNotFound: no such session; it names the closest ids (:mod:`difflib`).
        hwregress.store.store_errors.StoreUnavailable: the store cannot be read.
    """
    session = store.session(session_id)
    if session is None:
        known = [text for pair in store.session_names() for text in pair]
        raise SessionNotFound(session_id, difflib.get_close_matches(session_id, known, n=CLOSEST, cutoff=0.5))
    return results_from_rows(session, store.figures(session_ids=[session["id"]]))


def results_from_rows(session: Mapping[str, Any], figure_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The results document of one ``sessions`` row and its ``figures`` rows (column -> value): ``schema_version``,
    the session's ``meta`` and one record per test id (in the order of its first figure), as plain JSON types."""
    by_test: dict[str, list[Mapping[str, Any]]] = {}
    for figure in figure_rows:
        by_test.setdefault(figure["test_id"], []).append(figure)
    environments = session.get("environment") or {}
    records = [record_from_figures(figures, environments) for figures in by_test.values()]
    return {"schema_version": RESULTS_SCHEMA_VERSION, "meta": dict(session["meta"]), "records": records}


def record_from_figures(figures: Sequence[Mapping[str, Any]], environments: Mapping[str, Any]) -> dict[str, Any]:
    """One test's record (``results.json``'s JSON) from its figure rows; ``environments`` is the session's
    fingerprint per device."""
    first = figures[0]
    record: dict[str, Any] = {
        name: first[name] for name in ("test_id", "family", "hardware_key", "device", "device_name", "model", "mode",
                                       "batch_size", "dtype", "verdict", "baseline_recorded_at")}
    record.update(identity=dict(first["identity"] or {}), diagnosis=list(first["diagnosis"] or []),
                  environment=dict(environments.get(str(first["device"])) or {}))
    record["family"] = record["family"] or "throughput"
    record["verdict"] = record["verdict"] or "new"
    by_metric = {figure["metric"]: figure for figure in figures}
    for metric in METRICS:
        figure = by_metric.get(metric.name)
        if figure is not None:
            record.update(_metric_fields(metric, figure))
    record["declared"] = [_declared(figure) for figure in figures if figure["metric"] not in BY_NAME]
    return record


def _declared(figure: Mapping[str, Any]) -> dict[str, Any]:
    """A declared metric's sub-record (:class:`hwregress.store.figures.DeclaredFigures`) from its figure row; the row
    keeps no label: the metric's name stands for it."""
    reach = {"figure": figure["metric"], "mds": figure["mds"]} if figure["mds"] is not None else None
    return {"metric": figure["metric"], "value": figure["median"], "unit": figure["unit"],
            "direction": figure["direction"], "label": figure["metric"], "baseline": figure["baseline_median"],
            "threshold": figure["threshold"], "reach": reach}


def _metric_fields(metric: JudgedMetric, figure: Mapping[str, Any]) -> dict[str, Any]:
    """The record's fields of one figure: its value, baseline, reach, and the throughput's unit, samples and
    judgement (ratio, threshold, p-value) or the peak memory's ratio."""
    whole = metric.name in INTEGER_METRICS
    fields: dict[str, Any] = {metric.value: _number(figure["median"], whole),
                              metric.baseline: _number(figure["baseline_median"], whole)}
    if metric.reach is not None and figure["mds"] is not None:
        fields[metric.reach] = {"figure": metric.name, "mds": figure["mds"]}
    if metric.ratio is not None:
        fields[metric.ratio] = figure["ratio"]
    if metric.name == "throughput":
        fields.update(unit=figure["unit"] or "samples/s", samples=list(figure["samples"] or []),
                      threshold=figure["threshold"], p_value=figure["p_value"])
        if figure["q1"] is not None and figure["q3"] is not None:
            fields["throughput_iqr"] = figure["q3"] - figure["q1"]
    return fields


def _number(value: float | None, whole: bool) -> float | int | None:
    if value is None:
        return None
    return round(value) if whole else value
