"""The top of the report: one "what regressed" chart and a one-line summary.

The chart holds a dot per judged test (a record with a finite ratio to its baseline and a threshold), worst first
along x, at its ratio on y, over the test's threshold band ``[1 - threshold, 1 + threshold]`` (a regression lies
below it, an improvement above: :func:`hwregress.judge.compare.judge`). Dots are coloured and shaped by verdict; every
red test is numbered on the chart and listed beside it with its diagnosis. A dot's tooltip names what its throughput
verdict could catch (its minimum detectable slowdown, or why there is none: :mod:`hwregress.report.reach_view`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from markupsafe import Markup, escape

from hwregress.report import charts, legend
from hwregress.report.axes import _plottable, format_value, nice_axis
from hwregress.report.palette import marker_svg
from hwregress.report.reach_view import reach_summary, tooltip_text
from hwregress.report.record_values import number
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import verdict_rank

RED = ("regression", "failed")  # the verdicts the report shows in red
SUMMARY_VERDICTS = ("unstable", "new", "invalid")
# verdict -> (colour, marker): Okabe-Ito colours (see hwregress.report.palette) and a shape each, so no verdict
# depends on colour alone
VERDICT_STYLE = {"regression": ("#D55E00", "triangle-down"), "failed": ("#D55E00", "square"),
                 "invalid": ("#000000", "square"), "unstable": ("#E69F00", "diamond"),
                 "env-changed": ("#E69F00", "circle"), "other-hardware": ("#999933", "circle"),
                 "improvement": ("#CC79A7", "triangle"), "pass": ("#009E73", "circle")}
OTHER_STYLE = ("#777777", "circle")
MIN_STEP_PX, MAX_STEP_PX = 8, 40  # horizontal room per test
SIDE_PX, TOP_PX, PLOT_H = 60, 30, 200
BAND_FILL = "#888888"


class JudgedTest(NamedTuple):
    """One dot: the record, its ``ratio`` (current / baseline) and ``threshold`` (fraction)."""

    record: TestRecord
    ratio: float
    threshold: float


def judged_tests(records: Sequence[TestRecord]) -> list[JudgedTest]:
    """The records with a positive ratio that can be drawn (up to ``axes.PLOT_LIMIT``, as in every chart: a larger
    one comes from a corrupt baseline and no axis can hold it) and a finite threshold in [0, 1), worst first: by
    verdict (:func:`hwregress.store.verdicts.verdict_rank`), then by how far below its band's floor the ratio lies."""
    judged = []
    for r in records:
        ratio, threshold = number(r.ratio), number(r.threshold)
        if _plottable(ratio, log=False) and ratio > 0 and threshold is not None and 0 <= threshold < 1:
            judged.append(JudgedTest(r, float(ratio), float(threshold)))
    return sorted(judged, key=lambda j: (verdict_rank(j.record.verdict), j.ratio - (1 - j.threshold), j.record.test_id))


def summary_line(records: Sequence[TestRecord]) -> dict[str, int]:
    """``{"red": n, "unstable": n, "new": n, "invalid": n, "tests": n}``: red counts :data:`RED` verdicts."""
    verdicts = [str(r.verdict) for r in records]
    return {"red": sum(v in RED for v in verdicts), **{v: verdicts.count(v) for v in SUMMARY_VERDICTS},
            "tests": len(verdicts)}


DEFAULT_TITLE = "what regressed: ratio to baseline, worst first"


def regressed_chart(judged: Sequence[JudgedTest], title: str = DEFAULT_TITLE) -> Markup:
    """The chart (see the module docstring): ``judged`` in the order given, ``MIN_STEP_PX`` to ``MAX_STEP_PX`` px
    apart (the SVG as wide as it takes, at least ``charts.WIDTH``). Red dots are numbered 1, 2, ... in that order.
    Empty Markup without a judged test."""
    if not judged:
        return Markup("")
    step = min(MAX_STEP_PX, max(MIN_STEP_PX, (charts.WIDTH - 2 * SIDE_PX) / len(judged)))
    width = max(charts.WIDTH, math.ceil(2 * SIDE_PX + step * len(judged)))
    levels = [v for j in judged for v in (j.ratio, 1 - j.threshold, 1 + j.threshold)]
    axis = nice_axis(min(levels), max(levels))

    def y(value: float) -> float:
        return TOP_PX + (1 - axis.fraction(value)) * PLOT_H

    parts = [f'<text x="{width / 2:.1f}" y="18" class="title" text-anchor="middle">{escape(title)}</text>']
    for tick, label in zip(axis.ticks, axis.labels(), strict=True):
        parts.append(f'<line x1="{SIDE_PX}" y1="{y(tick):.1f}" x2="{width - SIDE_PX}" y2="{y(tick):.1f}" class="grid"/>'
                     f'<text x="{SIDE_PX - 5}" y="{y(tick) + 4:.1f}" class="tick" text-anchor="end">'
                     f'{escape(label)}</text>')
    parts.append(f'<line x1="{SIDE_PX}" y1="{y(1.0):.1f}" x2="{width - SIDE_PX}" y2="{y(1.0):.1f}" stroke="#444" '
                 f'stroke-width="1"><title>ratio 1: as fast as the baseline</title></line>')
    parts.append(f'<text transform="translate(14,{TOP_PX + PLOT_H / 2}) rotate(-90)" class="axis" '
                 f'text-anchor="middle">current / baseline</text>')
    placer = charts._LabelPlacer()
    red = 0
    for index, j in enumerate(judged):
        cx = SIDE_PX + step * (index + 0.5)
        parts.append(_band(cx, step, y(1 + j.threshold), y(1 - j.threshold), j))
        number_label = ""
        if str(j.record.verdict) in RED:
            red += 1
            number_label = placer.label(cx, y(j.ratio) - 8, str(red))
        color, shape = VERDICT_STYLE.get(str(j.record.verdict), OTHER_STYLE)
        parts.append(marker_svg(shape, cx, y(j.ratio), color, _tooltip(j), size=min(4.5, step / 2), css_class="dot"))
        parts.append(number_label)
    bottom = TOP_PX + PLOT_H
    parts.append(f'<text x="{width / 2:.1f}" y="{bottom + 16}" class="axis" text-anchor="middle">'
                 f'{len(judged)} judged tests, worst first (hover a dot for its test)</text>')
    drawn, legend_bottom = legend.layout(_legend_entries(judged), width, width, TOP_PX, TOP_PX, bottom + 22)
    height = math.ceil(legend_bottom) + 6
    return Markup(f'<svg class="chart regressed" role="img" aria-label="{escape(title)}" '
                  f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
                  f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}{drawn}</svg>')


def _band(cx: float, step: float, top: float, bottom: float, judged: JudgedTest) -> str:
    width = max(2.0, step * 0.6)
    return (f'<rect x="{cx - width / 2:.1f}" y="{top:.1f}" width="{width:.1f}" height="{max(bottom - top, 1.0):.1f}" '
            f'class="threshold-band" fill="{BAND_FILL}" fill-opacity="0.22"><title>{escape(judged.record.test_id)}: '
            f'threshold band {1 - judged.threshold:.3g}–{1 + judged.threshold:.3g}</title></rect>')


def _tooltip(judged: JudgedTest) -> str:
    r = judged.record
    band = f"{1 - judged.threshold:.3g}–{1 + judged.threshold:.3g}"
    figures = f"{format_value(r.throughput)} vs baseline {format_value(r.baseline_throughput)} {r.unit or ''}"
    text = f"{r.test_id}: {r.verdict}, ratio {judged.ratio:.3g} (band {band}), {figures}".strip()
    return "; ".join(filter(None, [text, tooltip_text(r.reach)]))


def _legend_entries(judged: Sequence[JudgedTest]) -> list[legend.LegendEntry]:
    present = list(dict.fromkeys(str(j.record.verdict) for j in judged))
    entries = [legend.LegendEntry(v, legend.marker_swatch(*VERDICT_STYLE.get(v, OTHER_STYLE))) for v in present]
    return [*entries, legend.LegendEntry("threshold band", legend.box_swatch(BAND_FILL, 0.35))]


def top_context(records: Sequence[TestRecord]) -> dict[str, Any]:
    """The template context of the report's top: ``summary_line`` (:func:`summary_line`), ``reach`` (what the session
    would catch: :func:`hwregress.report.reach_view.reach_summary`), ``what_regressed`` (the chart) and ``regressed``:
    the red judged tests in the chart's order, then red tests without a ratio, each
    ``{"number", "record", "ratio", "threshold"}`` (number None for a test not on the chart)."""
    judged = judged_tests(records)
    on_chart = [j for j in judged if str(j.record.verdict) in RED]
    charted_ids = {id(j.record) for j in on_chart}
    regressed = [{"number": n, "record": j.record, "ratio": j.ratio, "threshold": j.threshold}
                 for n, j in enumerate(on_chart, start=1)]
    regressed += [{"number": None, "record": r, "ratio": None, "threshold": None} for r in records
                  if str(r.verdict) in RED and id(r) not in charted_ids]
    return {"summary_line": summary_line(records), "reach": reach_summary(records),
            "what_regressed": regressed_chart(judged), "regressed": regressed}
