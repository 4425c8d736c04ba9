"""The report's serving section: a served LLM under a seeded load (:mod:`hwregress.plugin.families.serving`).

Records read (``hwregress.store.results.TestRecord`` with the ``serving`` view and a ``serving`` sub-record,
:class:`hwregress.store.serving_figures.ServingFigures`):

- an open- or closed-loop test: ``throughput`` is the windows' median output speed per user (tokens/s/user) against
  ``baseline_throughput``; the sub-record holds the pooled TTFT, TPOT and E2EL percentiles (ms) with each one's
  ``quantiles`` (the CDF) and the count that states it, each window's goodput and error rate, the SLOs; the record's
  ``declared`` figures hold the judged percentiles and goodput with their baselines' values. An A/B test's pooled
  latencies are stack B's and ``reference_ttft``/``reference_tpot`` stack A's, drawn on the same CDF;
- a rate sweep (``sweep`` points): each point's offered rate, goodput, request throughput, TTFT and TPOT p90/p99
  and error rate; its ``capacity`` (declared) against the baseline's, and its ``peak_goodput``.

Any figure may be missing, None or not finite (a failed test still has a record): such a figure is left out of the
charts and shown as "–", never an error. Records without a ``serving`` sub-record (skipped tests) are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from hwregress.report import charts
from hwregress.report.record_values import number, sort_key, text
from hwregress.report.spark_view import device_label, latency_cdf
from hwregress.store.results import TestRecord
from hwregress.store.serving_figures import LatencyFigures, ServingFigures, ServingWindowFigures

SERVING_VIEW = "serving"  # the record view of a served model under load (TestRecord.view)
PERCENTILES = (50, 90, 99)
CDF_LATENCIES = (("ttft", "TTFT", "slo_ttft_ms"), ("tpot", "TPOT", "slo_tpot_ms"))
SLO_AXIS_REACH = 3.0  # a CDF draws its SLO as a line only within this many times its largest latency


@dataclass(frozen=True)
class LatencyCells:
    """One latency's pooled percentiles (ms, None: not measured), their baselines' (ms, None: not judged), and the
    percentiles the request count states (``stated``, e.g. ``(50, 90)``: a p99 needs 459 requests)."""

    values: Mapping[int, float | None]
    baselines: Mapping[int, float | None]
    stated: tuple[int, ...]


@dataclass(frozen=True)
class ServingRow:
    """One open- or closed-loop test as a table row: its load, its speed per user (tokens/s/user) against the
    baseline's, its latencies (ms), goodput (requests/s, the windows' mean) against the baseline's, and the failed
    requests' fraction over its windows."""

    record: TestRecord
    device: str
    engine: str | None
    load: str
    lengths: str | None
    requests: int | float | None
    windows: int
    looks: str | None
    speed: float | None
    baseline_speed: float | None
    ratio: float | None
    ttft: LatencyCells
    tpot: LatencyCells
    e2el: LatencyCells
    goodput: float | None
    baseline_goodput: float | None
    error_rate: float | None
    slo: str
    ab: bool


@dataclass(frozen=True)
class SweepPoint:
    """One rate of a sweep: the offered ``rate``, ``goodput`` and ``request_throughput`` (requests/s), TTFT and TPOT
    p90/p99 (ms) and the failed requests' fraction."""

    rate: float | None
    goodput: float | None
    request_throughput: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    error_rate: float | None


@dataclass(frozen=True)
class SweepRow:
    """A rate-sweep test: its points by rising rate, its capacity (requests/s) and the baseline's, its peak goodput
    (requests/s). ``capacity_censored``: the capacity is the sweep's highest rate, where goodput was still rising: the
    server's capacity is that or more."""

    record: TestRecord
    device: str
    engine: str | None
    lengths: str | None
    requests: int | float | None
    points: list[SweepPoint]
    capacity: float | None
    baseline_capacity: float | None
    peak_goodput: float | None
    slo: str
    capacity_censored: bool


def serving_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """The template variables of ``_serving.html.j2`` from a session's serving records (any order):
    ``serving_rows`` (list of :class:`ServingRow`), ``serving_latency_charts`` (SVG Markup: per test the CDFs of
    TTFT and TPOT with the percentiles, the baseline's and the SLO marked), ``serving_sweep_rows`` (list of
    :class:`SweepRow`), ``serving_sweep_charts`` (SVG Markup: per sweep goodput, TTFT and TPOT over the offered rate,
    with the SLO lines) and ``has_serving``."""
    shown = sorted((r for r in records if r.view == SERVING_VIEW and r.serving is not None), key=_order)
    sweeps = [r for r in shown if r.serving is not None and r.serving.sweep]
    loads = [r for r in shown if r not in sweeps]
    rows = [serving_row(r) for r in loads]
    sweep_rows = [sweep_row(r) for r in sweeps]
    return {
        "serving_rows": rows,
        "serving_latency_charts": [chart for row in rows for chart in latency_charts(row) if chart],
        "serving_sweep_rows": sweep_rows,
        "serving_sweep_charts": [chart for row in sweep_rows for chart in sweep_charts(row) if chart],
        "has_serving": bool(shown),
    }


def _order(record: TestRecord) -> tuple[Any, ...]:
    return (device_label(record), str(record.model or ""), str(record.mode or ""), sort_key(record.batch_size),
            record.test_id)


def _declared(record: TestRecord) -> dict[str, tuple[float | None, float | None]]:
    """The record's declared figures: metric -> (value, baseline value)."""
    return {figure.metric: (number(figure.value), number(figure.baseline))
            for figure in record.declared if figure.metric}


def _cells(latency: LatencyFigures | None, name: str, declared: Mapping[str, tuple[float | None, float | None]]
           ) -> LatencyCells:
    latency = latency or LatencyFigures()
    values = {p: number(getattr(latency, f"p{p}")) for p in PERCENTILES}
    stated = tuple(p for p in PERCENTILES if number(getattr(latency, f"p{p}_bound")) is not None)
    baselines = {p: declared.get(f"{name}_p{p}_ms", (None, None))[1] for p in PERCENTILES}
    return LatencyCells(values, baselines, stated)


def load_text(serving: ServingFigures) -> str:
    """``4 requests/s, open loop (Poisson)`` or ``4 clients, closed loop`` (a sweep's load is its table's)."""
    if number(serving.rate) is not None:
        burst = number(serving.burstiness)  # None: constant gaps (an infinite gamma shape)
        shape = "constant gaps" if burst is None else "Poisson" if burst == 1 else f"gamma shape {burst:g}"
        return f"{charts.format_value(serving.rate)} requests/s, open loop ({shape})"
    if number(serving.concurrency) is not None:
        return f"{charts.format_value(serving.concurrency)} clients, closed loop"
    return "–"


def slo_text(serving: ServingFigures) -> str:
    """``TTFT ≤ 1000 ms, TPOT ≤ 100 ms``; ``none`` without bounds."""
    bounds = [f"{name} ≤ {charts.format_value(value)} ms" for name, value in
              (("TTFT", number(serving.slo_ttft_ms)), ("TPOT", number(serving.slo_tpot_ms))) if value is not None]
    return ", ".join(bounds) or "none"


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _error_rate(windows: Sequence[ServingWindowFigures]) -> float | None:
    """Failed requests over those sent, over ``windows``."""
    counts = [(number(w.failed), number(w.completed)) for w in windows]
    if not windows or any(failed is None or done is None for failed, done in counts):
        return _mean([number(w.error_rate) for w in windows])  # counts missing: the windows' rates
    failed = sum(f for f, _ in counts if f is not None)
    sent = failed + sum(d for _, d in counts if d is not None)
    return failed / sent if sent else None


def serving_row(record: TestRecord) -> ServingRow:
    """The table row of one open- or closed-loop record; details it lacks are None."""
    serving = record.serving or ServingFigures()
    declared = _declared(record)
    goodput, baseline_goodput = declared.get("goodput", (None, None))
    if goodput is None:
        goodput = _mean([number(w.goodput) for w in serving.windows])
    looks = record.looks
    looks_text = (f"{', '.join(str(n) for n in looks.rounds)} of {', '.join(str(n) for n in looks.planned)}"
                  if looks is not None and looks.rounds else None)
    return ServingRow(
        record=record, device=device_label(record), engine=_engine(serving), load=load_text(serving),
        lengths=text(serving.lengths), requests=number(serving.requests), windows=len(serving.windows),
        looks=looks_text, speed=number(record.throughput), baseline_speed=number(record.baseline_throughput),
        ratio=number(record.ratio), ttft=_cells(serving.ttft, "ttft", declared),
        tpot=_cells(serving.tpot, "tpot", declared), e2el=_cells(serving.e2el, "e2el", declared),
        goodput=goodput, baseline_goodput=baseline_goodput, error_rate=_error_rate(serving.windows),
        slo=slo_text(serving), ab=record.ab is not None)


def _engine(serving: ServingFigures) -> str | None:
    engine, version = text(serving.engine), text(serving.engine_version)
    return f"{engine} {version}" if engine and version else engine


def latency_charts(row: ServingRow) -> list[Markup]:
    """Per latency (TTFT, TPOT) the CDF of the test's requests (an A/B test: stack A's and stack B's), with the
    percentiles the count states, the baseline's judged ones and the SLO marked (named in the title instead where it
    lies beyond :data:`SLO_AXIS_REACH` times the largest latency drawn)."""
    record = row.record
    serving = record.serving or ServingFigures()
    out = []
    for name, label, slo_field in CDF_LATENCIES:
        latency: LatencyFigures | None = getattr(serving, name)
        series: dict[str, list[tuple[Any, Any]]] = {}
        if row.ab:
            reference: LatencyFigures | None = getattr(serving, f"reference_{name}", None)
            series["stack A"] = latency_cdf(reference.quantiles if reference else None)
            series["stack B"] = latency_cdf(latency.quantiles if latency else None)
        else:
            series["this session"] = latency_cdf(latency.quantiles if latency else None)
        cells = getattr(row, name)
        for p in cells.stated:
            value = cells.values.get(p)
            if value is not None:
                series[f"p{p} {charts.format_value(value)} ms"] = [(value, p / 100)]
        for p, value in cells.baselines.items():
            if value is not None:
                series[f"baseline p{p} {charts.format_value(value)} ms"] = [(value, p / 100)]
        drawn = [x for points in series.values() for x, _ in points if number(x) is not None]
        bound = number(getattr(serving, slo_field))
        beyond = bound is not None and bool(drawn) and bound > SLO_AXIS_REACH * max(drawn)
        if bound is not None and not beyond:
            series[f"SLO {charts.format_value(bound)} ms"] = [(bound, 0.0), (bound, 1.0)]
        if not any(len(points) > 1 for points in series.values() if not _is_mark(points)):
            continue  # no CDF to draw: the marks alone say nothing
        title = f"{label} — {record.model or '?'} {record.mode or ''}, {row.device}"
        if beyond:  # drawn, it would squeeze the distribution into the axis's first tick
            title += f" (SLO {charts.format_value(bound)} ms, beyond the axis)"
        out.append(charts.line_chart(series, title, f"{label} (ms)", "fraction of requests ≤ latency"))
    return out


def _is_mark(points: Sequence[tuple[Any, Any]]) -> bool:
    return len(points) == 1 or (len(points) == 2 and points[0][0] == points[1][0])


def sweep_row(record: TestRecord) -> SweepRow:
    """The table row of one rate-sweep record; details it lacks are None."""
    serving = record.serving or ServingFigures()
    declared = _declared(record)
    points = sorted((_point(point) for point in serving.sweep), key=lambda p: (p.rate is None, p.rate or 0.0))
    capacity, baseline_capacity = declared.get("capacity", (number(serving.capacity), None))
    rates = [p.rate for p in points if p.rate is not None]
    return SweepRow(record=record, device=device_label(record), engine=_engine(serving),
                    lengths=text(serving.lengths), requests=number(serving.requests), points=points,
                    capacity=capacity if capacity is not None else number(serving.capacity),
                    baseline_capacity=baseline_capacity,
                    peak_goodput=number(serving.peak_goodput), slo=slo_text(serving),
                    capacity_censored=len(rates) > 1 and capacity is not None and capacity == max(rates))


def _point(point: Any) -> SweepPoint:
    ttft, tpot = point.ttft or LatencyFigures(), point.tpot or LatencyFigures()
    return SweepPoint(rate=number(point.rate), goodput=number(point.goodput),
                      request_throughput=number(point.request_throughput), ttft_p90=number(ttft.p90),
                      ttft_p99=number(ttft.p99), tpot_p90=number(tpot.p90), tpot_p99=number(tpot.p99),
                      error_rate=number(point.error_rate))


def sweep_charts(row: SweepRow) -> list[Markup]:
    """The sweep's goodput over the offered rate (with the rate itself: every request within its SLOs, and the
    capacity marked), and its TTFT and TPOT p90/p99 over the offered rate with each SLO as a line."""
    record = row.record
    serving = record.serving or ServingFigures()
    where = f"{record.model or '?'} {row.lengths or ''}, {row.device}"
    rates = [p.rate for p in row.points if p.rate is not None]
    goodput: dict[str, list[tuple[Any, Any]]] = {
        "goodput": [(p.rate, p.goodput) for p in row.points],
        "offered rate (every request within its SLOs)": [(rate, rate) for rate in rates]}
    at_capacity = next((p.goodput for p in row.points if p.rate == row.capacity), None)
    if row.capacity is not None and at_capacity is not None:
        goodput[f"capacity {charts.format_value(row.capacity)} requests/s"] = [(row.capacity, at_capacity)]
    out = [charts.line_chart(goodput, f"Goodput over the offered rate — {where}", "offered rate (requests/s)",
                             "goodput (requests/s)")]
    for name, label, slo_field in CDF_LATENCIES:
        series: dict[str, list[tuple[Any, Any]]] = {
            f"{label} p{p}": [(point.rate, getattr(point, f"{name}_p{p}")) for point in row.points]
            for p in (90, 99)}
        bound = number(getattr(serving, slo_field))
        if bound is not None and rates:
            series[f"SLO {charts.format_value(bound)} ms"] = [(min(rates), bound), (max(rates), bound)]
        out.append(charts.line_chart(series, f"{label} over the offered rate — {where}", "offered rate (requests/s)",
                                     f"{label} (ms)"))
    return out
