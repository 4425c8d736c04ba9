"""The judged metrics, declared once: each figure a record may be judged on, the record's fields of its value, its
baseline's value and what its verdict could catch, which way is better, its unit and its label. The fleet store's
figure rows (:func:`hwregress.store.session_rows.figure_rows`), a session rebuilt from them
(:mod:`hwregress.store.session_results`), the record's reaches (:meth:`hwregress.store.results.TestRecord.reaches`),
the sub-records the judge fills (:data:`REACH_FIELDS`), the report's "catches ≥" cells
(:mod:`hwregress.report.reach_view`) and the fleet page (:mod:`hwregress.report.fleet_view`) iterate over
:data:`METRICS`; the rules that judge each (Mann-Whitney on the throughput's samples, a threshold on the latency,
speedup and efficiency, a ceiling on the peak memory, a floor on the accuracy) are :mod:`hwregress.judge.compare`'s.

Units: ``unit`` None means the record's own ``unit`` (samples/s for models, TFLOP/s or GB/s for ceilings).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JudgedMetric:
    """One judged figure.

    Attributes:
        name: the metric's name: a figure row's ``metric``, a reach's ``figure`` (:class:`hwregress.store.figures.
            ReachFigures`), the key of a fleet page's table.
        value: the :class:`hwregress.store.results.TestRecord` field of the value.
        baseline: the record's field of the baseline entry's value.
        direction: ``"higher"`` or ``"lower"``: which way is better.
        unit: the value's unit, None: the record's ``unit``.
        reach: the record's field of what the verdict could catch (a ``ReachFigures``), None: it states none.
        ratio: the record's field of the value over the baseline's, None: the record keeps none.
        label: how the report's "catches ≥" column names it (empty for the throughput, the column's own figure).
    """

    name: str
    value: str
    baseline: str
    direction: str
    unit: str | None
    reach: str | None
    ratio: str | None
    label: str

    @property
    def slowdown_sign(self) -> str:
        """The sign of the change a slowdown makes to the value as the report writes it beside an MDS: ``+`` for a
        figure where lower is better (a latency grows), ``−`` where higher is, none for the throughput (the column's
        own figure)."""
        if not self.label:
            return ""
        return "+" if self.direction == "lower" else "−"


METRICS = (
    JudgedMetric("throughput", "throughput", "baseline_throughput", "higher", None, "reach", "ratio", ""),
    JudgedMetric("latency", "latency_ms", "baseline_latency_ms", "lower", "ms", "latency_reach", None, "latency"),
    JudgedMetric("peak_memory", "peak_memory_bytes", "baseline_peak_memory_bytes", "lower", "bytes", None,
                 "memory_ratio", "peak memory"),
    JudgedMetric("accuracy", "accuracy", "baseline_accuracy", "higher", "fraction", None, None, "accuracy"),
    JudgedMetric("efficiency", "efficiency", "baseline_efficiency", "higher", "fraction", "efficiency_reach", None,
                 "efficiency"),
    JudgedMetric("speedup", "speedup", "baseline_speedup", "higher", "x", "speedup_reach", None, "speedup"),
)
"""Every judged metric, the throughput first: a test's headline reach is the throughput's where it was judged."""

BY_NAME = {metric.name: metric for metric in METRICS}
REACH_FIELDS = tuple(metric.reach for metric in METRICS if metric.reach)
"""The record's fields of what each verdict could catch, in :data:`METRICS` order (``reach``, ``latency_reach``,
``efficiency_reach``, ``speedup_reach``): sub-records the judge fills (:func:`hwregress.judge.compare.judge`), whatever
the family; a family declares only the ones its measurement fills (``Family.sub_records``)."""
