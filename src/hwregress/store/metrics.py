"""The judged metrics, declared once: each figure a record may be judged on, where the record keeps its value, its
baseline's value and what its verdict could catch, which way is better, its unit, its label and the rule that judges
it. The fleet store's figure rows (:func:`hwregress.store.session_rows.figure_rows`), a session rebuilt from them
(:mod:`hwregress.store.session_results`), the record's reaches (:meth:`hwregress.store.results.TestRecord.reaches`),
the history rows' figures (:func:`hwregress.store.history_row.row_from_record`), JUnit's properties
(:mod:`hwregress.plugin.record`) and the report's "catches ≥" cells (:mod:`hwregress.report.reach_view`) read them
through :func:`figures_of`, the one canonical figure of each, which iterates :data:`METRICS` and then the record's
declared metrics; the record's reaches (:data:`REACH_FIELDS`) and the fleet page (:mod:`hwregress.report.fleet_view`)
read the table itself.

A project adds a judged metric as one row: :func:`register` a :class:`JudgedMetric` (from its family's module or a
pytest plugin of its own, e.g. the root ``conftest.py``), and hand its value to the record
(``MeasuredFigures(declared={"ttft_p99_ms": 41.5})``, :func:`hwregress.store.assembly.put_measured`). It is judged by
the threshold rule (:func:`hwregress.judge.compare.judge`, like the built-in latency), pooled in the baseline entry
(``metrics``, ``metric_history``; a value must be finite, and above 0 to be pooled and judged), stored in the
record's ``declared`` sub-records, the history's and the fleet store's rows, JUnit's properties and the report, with
no hwregress file touched (``tests/plugin/test_declared_metric_e2e.py`` proves it).

Rules: ``samples`` (Mann-Whitney on the per-round samples against the baseline's pooled samples: the throughput),
``threshold`` (the value against the median of the baseline's recorded sessions, tolerating the throughput
comparison's threshold widened by the figure's drift between sessions: latency, efficiency, speedup and every declared
metric), ``ceiling`` (the peak memory under the baseline's x (1 + tolerance) + slack) and ``floor`` (the accuracy above
the baseline's - margin); :mod:`hwregress.judge.compare` implements them.

Units: ``unit`` None means the record's own ``unit`` (samples/s for models, TFLOP/s or GB/s for ceilings).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

RULES = ("samples", "threshold", "ceiling", "floor")
DIRECTIONS = ("higher", "lower")
METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a JUnit property, a store row's metric (64 characters), a key


@dataclass(frozen=True)
class JudgedMetric:
    """One judged figure.

    Attributes:
        name: the metric's name: a figure row's ``metric``, a reach's ``figure`` (:class:`hwregress.store.figures.
            ReachFigures`), the key of a fleet page's table, a declared metric's key in the baseline entry.
        direction: ``"higher"`` or ``"lower"``: which way is better.
        unit: the value's unit, None: the record's ``unit``.
        label: how the report names it (empty for the throughput, the table's own figure).
        rule: how it is judged (:data:`RULES`, module doc); a declared metric's is ``threshold``.
        value: the :class:`hwregress.store.results.TestRecord` field of the value; None for a declared metric, whose
            value, baseline and reach live in the record's ``declared`` sub-records
            (:class:`hwregress.store.figures.DeclaredFigures`).
        baseline: the record's field of the baseline entry's value (None: declared).
        reach: the record's field of what the verdict could catch (a ``ReachFigures``), None: it states none or it
            is declared.
        ratio: the record's field of the value over the baseline's, None: the record keeps none.
    """

    name: str
    direction: str
    unit: str | None
    label: str
    rule: str = "threshold"
    value: str | None = None
    baseline: str | None = None
    reach: str | None = None
    ratio: str | None = None

    @property
    def declared(self) -> bool:
        """Whether a project declared it (its figures live in the record's ``declared`` sub-records)."""
        return self.value is None

    @property
    def slowdown_sign(self) -> str:
        """The sign of the change a slowdown makes to the value as the report writes it beside an MDS: ``+`` for a
        figure where lower is better (a latency grows), ``−`` where higher is, none for the throughput (the column's
        own figure)."""
        return slowdown_sign(self.label, self.direction)


def slowdown_sign(label: str, direction: str) -> str:
    """:attr:`JudgedMetric.slowdown_sign` of a figure of ``label`` and ``direction``."""
    if not label:
        return ""
    return "+" if direction == "lower" else "−"


METRICS = (
    JudgedMetric("throughput", "higher", None, "", "samples", "throughput", "baseline_throughput", "reach", "ratio"),
    JudgedMetric("latency", "lower", "ms", "latency", "threshold", "latency_ms", "baseline_latency_ms",
                 "latency_reach"),
    JudgedMetric("peak_memory", "lower", "bytes", "peak memory", "ceiling", "peak_memory_bytes",
                 "baseline_peak_memory_bytes", None, "memory_ratio"),
    JudgedMetric("accuracy", "higher", "fraction", "accuracy", "floor", "accuracy", "baseline_accuracy"),
    JudgedMetric("efficiency", "higher", "fraction", "efficiency", "threshold", "efficiency", "baseline_efficiency",
                 "efficiency_reach"),
    JudgedMetric("speedup", "higher", "x", "speedup", "threshold", "speedup", "baseline_speedup", "speedup_reach"),
)
"""Every built-in judged metric, the throughput first: a test's headline reach is the throughput's where it was
judged."""

BY_NAME = {metric.name: metric for metric in METRICS}
REACH_FIELDS = tuple(metric.reach for metric in METRICS if metric.reach)
"""The record's fields of what each built-in verdict could catch, in :data:`METRICS` order (``reach``,
``latency_reach``, ``efficiency_reach``, ``speedup_reach``): sub-records the judge fills
(:func:`hwregress.judge.compare.judge`), whatever the family; a family declares only the ones its measurement fills
(``Family.sub_records``)."""

_DECLARED: dict[str, JudgedMetric] = {}


class MetricError(ValueError):
    """A metric that cannot be registered, or a value of one that is not declared; the message names it, why, and
    the fix."""


def register(metric: JudgedMetric) -> JudgedMetric:
    """Declare ``metric``, a judged figure of a project's own, in this process; returns it (a module may write
    ``TTFT_P99 = register(JudgedMetric("ttft_p99_ms", "lower", "ms", "TTFT p99"))``). Registering an equal metric
    again changes nothing. Every process that records or judges it must register it (a module pytest imports in each
    xdist worker: a plugin, the root ``conftest.py``, the family's module); readers of results files need not, as
    each record carries its declared figures' unit, direction and label.

    Raises:
        MetricError: the name is not at most 64 lower-case letters, digits and ``_`` starting with a letter, or is
            a built-in metric's (:data:`METRICS`), or is taken by another declaration; the direction is not
            ``higher`` or ``lower``; the rule is not ``threshold`` (the one rule a declared metric is judged by); the
            unit or label is not text; or a record field is named (a declared metric's figures live in the record's
            ``declared``).
    """
    where = f"judged metric {metric.name!r}"
    if not isinstance(metric.name, str) or not METRIC_NAME.fullmatch(metric.name):
        raise MetricError(f"{where}: a name is at most 64 lower-case letters, digits and '_', starting with a "
                          "letter (it names JUnit properties, the fleet store's rows and baseline keys)")
    if metric.name in BY_NAME:
        raise MetricError(f"{where}: a built-in metric has that name ({', '.join(BY_NAME)}); choose another")
    if metric.direction not in DIRECTIONS:
        raise MetricError(f"{where}: direction {metric.direction!r} is not one of {', '.join(DIRECTIONS)}")
    if metric.rule != "threshold":
        raise MetricError(f"{where}: rule {metric.rule!r}: a declared metric is judged by the threshold rule "
                          "('threshold'; see hwregress.store.metrics)")
    if not isinstance(metric.unit, str) or not metric.unit or not isinstance(metric.label, str):
        raise MetricError(f"{where}: the unit (e.g. 'ms') and the label (e.g. 'TTFT p99') must be text, found "
                          f"{metric.unit!r} and {metric.label!r}")
    if not metric.declared or metric.baseline or metric.reach or metric.ratio:
        raise MetricError(f"{where}: leave value, baseline, reach and ratio unset: a declared metric's figures live in "
                          "the record's 'declared' sub-records")
    known = _DECLARED.get(metric.name)
    if known is not None and known != metric:
        raise MetricError(f"{where} is declared already as {known}; one name, one declaration")
    _DECLARED[metric.name] = metric
    return metric


def declared(name: str) -> JudgedMetric:
    """The declared metric named ``name``.

    Raises:
        MetricError: none is registered under it (the message names those that are and the fix).
    """
    found = _DECLARED.get(name)
    if found is None:
        known = ", ".join(sorted(_DECLARED)) or "none"
        raise MetricError(f"no judged metric {name!r} is declared in this process (declared: {known}); declare it "
                          "with hwregress.store.metrics.register(JudgedMetric(...)) in a module every process imports "
                          "(the root conftest.py, a plugin, the family's module)")
    return found


def unregister(name: str) -> None:
    """Forget the declared metric ``name`` (a test that declared one for itself); nothing if none is."""
    _DECLARED.pop(name, None)


def judged_metrics() -> tuple[JudgedMetric, ...]:
    """The built-in metrics (:data:`METRICS`), then those declared in this process, in the order they were."""
    return (*METRICS, *_DECLARED.values())


@dataclass(frozen=True)
class Figure:
    """One judged metric's figure on one record, whichever way the record keeps it: the canonical figure that the
    figure rows, the history rows, JUnit and the report's reach cells are written from.

    Attributes:
        metric: the metric's name.
        label: the report's name of it (empty: the throughput).
        unit: the value's unit.
        direction: ``higher`` or ``lower``: which way is better (empty: a declared figure read from a file that
            names none).
        value: this session's value (None: not measured).
        baseline: the baseline entry's value (None: not judged).
        ratio: value / baseline: the record's own where it keeps one (throughput, peak memory), a declared
            metric's computed, else None.
        threshold: the change tolerated (fraction) where the record keeps it, else None.
        reach: what its verdict could catch (a :class:`hwregress.store.figures.ReachFigures`), None: none stated.
    """

    metric: str
    label: str
    unit: str
    direction: str
    value: float | None
    baseline: float | None
    ratio: float | None
    threshold: float | None
    reach: Any

    @property
    def slowdown_sign(self) -> str:
        """See :attr:`JudgedMetric.slowdown_sign`."""
        return slowdown_sign(self.label, self.direction)


def figures_of(record: Any) -> list[Figure]:
    """Each judged metric's figure on ``record`` (a :class:`hwregress.store.results.TestRecord`) that has a value or a
    reach (or, the throughput, per-round samples): the built-in metrics' from their fields, in :data:`METRICS` order,
    then the record's declared figures, the first of each metric."""
    found = [figure for figure in (_built_in(record, metric) for metric in METRICS)
             if figure.value is not None or figure.reach is not None
             or (figure.metric == "throughput" and record.samples)]
    seen = {figure.metric for figure in found}
    for d in getattr(record, "declared", None) or ():
        if d.metric and d.metric not in seen and (d.value is not None or d.reach is not None):
            seen.add(d.metric)  # one figure a metric, as the store's rows are keyed (a hand-edited file may repeat one)
            found.append(Figure(d.metric, d.label or d.metric, d.unit or "", d.direction or "",
                                finite_number(d.value), finite_number(d.baseline), _ratio(d.value, d.baseline),
                                finite_number(d.threshold), d.reach))
    return found


def _built_in(record: Any, metric: JudgedMetric) -> Figure:
    reach = getattr(record, metric.reach) if metric.reach else None
    threshold = record.threshold if metric.name == "throughput" else getattr(reach, "threshold", None)
    value, baseline = getattr(record, metric.value or ""), getattr(record, metric.baseline or "")
    ratio = getattr(record, metric.ratio) if metric.ratio else None
    return Figure(metric.name, metric.label, metric.unit or record.unit, metric.direction, finite_number(value),
                  finite_number(baseline), finite_number(ratio), finite_number(threshold), reach)


def _ratio(value: float | None, baseline: float | None) -> float | None:
    value, baseline = finite_number(value), finite_number(baseline)
    return value / baseline if value is not None and baseline else None


def finite_number(value: Any) -> float | None:
    """``value`` as a float where it is a finite real number (not a bool), else None: how a figure's value, baseline,
    ratio and threshold are read off a record, and a row's numbers off a figure."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)
