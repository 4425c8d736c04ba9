"""The test record's assembler: the one module that writes a :class:`~hwregress.store.results.TestRecord`'s fields.

A record is built from its stages, each a frozen value made once elsewhere, in this order:

1. the test's identity, given to the record's constructor (:meth:`hwregress.plugin.fixture.HwBench.start`);
2. what its window measured (:class:`hwregress.store.measured.MeasuredFigures`): :func:`put_measured`;
3. what judging it concluded (:class:`hwregress.store.judged.Conclusion`, its figures a
   :class:`~hwregress.store.judged.JudgedFigures`): :func:`put_conclusion` (:func:`put_judged` alone where a record
   is judged again, as ``report compare`` does);
4. pytest's outcome of the test and the verdict it settles: :func:`put_outcome`, the only function that sets a
   record's verdict.

Every other module reads records; ``tests/project/test_architecture.py`` finds any assignment to a record's field
outside this module.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
from collections.abc import Mapping

from hwregress.store.figures import CompileFigures, DeclaredFigures
from hwregress.store.judged import RECORD_FIELDS, Conclusion, JudgedFigures
from hwregress.store.measured import MEASURED_FIELDS, MERGED_FIELDS, SEQUENCE_FIELDS, MeasuredFigures
from hwregress.store.metrics import declared
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict


def put_measured(record: TestRecord, measured: MeasuredFigures) -> TestRecord:
    """Put what a window measured on ``record`` and return it: every figure ``measured`` holds (a None or an empty
    sequence leaves the record's own value: the batch size and unit it started with, a field another stage filled),
    sequences as lists and mappings as dicts; ``details``, ``environment`` and ``identity`` add to the record's,
    each declared metric's value becomes its :class:`~hwregress.store.figures.DeclaredFigures`, and ``throttled`` is
    whether the telemetry names any ``throttle_reasons`` (where the measurement holds telemetry).

    Raises:
        MetricError: a declared value of a metric no one declared (:func:`hwregress.store.metrics.register`).
        ValueError: a declared value that is not a finite number.

    Either raises before the record changes.
    """
    declared_figures = _declared_figures(measured.declared)  # checked before the record changes at all
    for name in MEASURED_FIELDS:
        value = getattr(measured, name)
        if name == "declared":
            names = {figure.metric for figure in declared_figures}
            record.declared = [*(d for d in record.declared if d.metric not in names), *declared_figures]
        elif name in MERGED_FIELDS:
            getattr(record, name).update(value)
        elif name in SEQUENCE_FIELDS:
            if value:
                setattr(record, name, list(value))
        elif value is not None:
            setattr(record, name, dict(value) if isinstance(value, types.MappingProxyType) else value)
    if measured.telemetry is not None:
        record.throttled = bool(measured.telemetry.get("throttle_reasons"))
    return record


def _declared_figures(values: Mapping[str, float]) -> list[DeclaredFigures]:
    """The record's :class:`~hwregress.store.figures.DeclaredFigures` of ``values`` (metric name -> value), each with
    its metric's unit, direction and label.

    Raises:
        MetricError: a name no :func:`hwregress.store.metrics.register` declared in this process.
        ValueError: a value that is not a finite real number (the message names the metric and the value).
    """
    figures = []
    for name, value in values.items():
        metric = declared(name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"the value of the declared metric {name!r} must be a finite number in {metric.unit}, "
                             f"found {value!r}")
        figures.append(DeclaredFigures(metric=name, value=float(value), unit=metric.unit, direction=metric.direction,
                                       label=metric.label or name))
    return figures


def put_judged(record: TestRecord, figures: JudgedFigures) -> None:
    """Put ``figures`` on ``record``: each judged field (None where not judged, so that a record judged a second time
    keeps nothing of the first), the environment and identity changes, and ``record.compile.vs_baseline`` (made where
    the record has no compile figures yet; cleared where not compared)."""
    for name in RECORD_FIELDS:
        setattr(record, name, getattr(figures, name))
    judged = {figure.metric: figure for figure in figures.declared}
    record.declared = [_judged_declared(figure, judged.get(figure.metric)) for figure in record.declared]
    record.env_changes = list(figures.env_changes)
    record.identity_changes = list(figures.identity_changes)
    if figures.compile_vs_baseline is not None:
        record.compile = record.compile or CompileFigures()
        record.compile.vs_baseline = figures.compile_vs_baseline
    elif record.compile is not None:
        record.compile.vs_baseline = None


def _judged_declared(figure: DeclaredFigures, judged: DeclaredFigures | None) -> DeclaredFigures:
    """``figure`` with the baseline, threshold and reach of its judgement (all None where it was not judged)."""
    if judged is None:
        return dataclasses.replace(figure, baseline=None, threshold=None, reach=None)
    return dataclasses.replace(figure, baseline=judged.baseline, threshold=judged.threshold, reach=judged.reach)


def put_conclusion(record: TestRecord, conclusion: Conclusion) -> None:
    """Put ``conclusion`` on ``record``, all but its verdict (:func:`put_outcome` settles that with pytest's outcome):
    the judged figures (:func:`put_judged`), the message, the baseline action, when the baseline entry was recorded and
    the diagnosis."""
    put_judged(record, conclusion.figures)
    record.message = conclusion.message
    record.baseline_action = conclusion.baseline_action
    record.baseline_recorded_at = conclusion.baseline_recorded_at
    record.diagnosis = list(conclusion.diagnosis)


def put_outcome(record: TestRecord, outcome: str, verdict: Verdict | None, message: str,
                duration_s: float | None) -> None:
    """Put pytest's ``outcome`` of the test (``passed``, ``failed``, ``skipped``) on ``record`` with the ``verdict`` it
    settled (None: a teardown's failure, which keeps the verdict settled before), the record's ``message`` and the
    wall time of the phase that concluded it (``duration_s``, s; None keeps a duration the family measured)."""
    record.outcome = outcome
    if record.duration_s is None and duration_s is not None:
        record.duration_s = duration_s
    if verdict is not None:
        record.verdict = verdict
    record.message = message
