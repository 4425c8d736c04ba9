"""The trend chart of the report's history section: one line per test or hardware key over its sessions, the IQR
band of each session's samples, the baseline level it is judged against and the change points marked, drawn with
the primitives of :mod:`hwregress.report.charts`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import count
from typing import Any, NamedTuple

from markupsafe import Markup, escape

from hwregress.report import legend

# the drawing primitives and axis helpers are package-internal: shared by the chart modules of report/, not API
from hwregress.report.axes import (
    MAX_DATA_TICKS,
    NICE_MANTISSAS,
    Axis,
    _exact,
    _multiple,
    _plottable,
    _widen_if_flat,
    format_value,
    nice_axis,
)
from hwregress.report.charts import (
    MARGIN,
    PLOT_H,
    PLOT_W,
    _frame,
    _grid,
    _LabelPlacer,
    _Plot,
    _polyline,
    _wrap_with_legend,
)
from hwregress.report.palette import BASELINE_DASH, SeriesStyle, marker_svg, series_style


class TrendPoint(NamedTuple):
    """One session of one test: ``x`` its position in the series (0, 1, 2, ... with the sessions in time
    order), ``median`` of its per-round throughput samples, ``q1``/``q3`` their 25th/75th percentiles
    (None: unknown), ``label`` the tooltip text (e.g. ``2026-11-23 14:02 UTC, pass``)."""

    x: Any
    median: Any
    q1: Any = None
    q3: Any = None
    label: str = ""


class TrendMark(NamedTuple):
    """A change point: ``x`` the position of the first session after the change, ``label`` e.g.
    ``-12.3%, p=0.001``."""

    x: Any
    label: str


class TrendSeries(NamedTuple):
    """One line of a trend chart: ``label`` for the legend (a hardware key or a test name), its points,
    the ``baseline`` level it is judged against (a dashed horizontal line; None: none) and its change
    points."""

    label: str
    points: Sequence[TrendPoint]
    baseline: Any = None
    change_points: Sequence[TrendMark] = ()


CHANGE_LABEL_ROWS = 3  # rows of change-point labels at the top of a trend chart before one is left out


def trend_chart(series: Sequence[TrendSeries], title: str, y_label: str, x_label: str = "session") -> Markup:
    """Performance over sessions: per series a translucent interquartile band (over the points with both
    quartiles, drawn from 2 such points), the median line with a marker and tooltip per session, the
    baseline as a dashed horizontal line and each change point as a dashed vertical line between the
    last session before it and the first after, labelled at the top where there is room.

    The y axis is linear over all medians, quartiles and baselines and does not start at zero, so a step
    of a few percent stays visible; the x axis ticks whole sessions numbered from 1 (position 0 is
    session 1). Series keep their look (:func:`hwregress.report.palette.series_style`: colour, and marker shape past
    the palette's 25 colours) by their index in ``series``. Figures that cannot be drawn are left out (see
    :func:`_plottable`); empty Markup when no point can be drawn.
    """
    drawn = [(series_style(index), s, _trend_points(s)) for index, s in enumerate(series)]
    drawn = [(style, s, points) for style, s, points in drawn if points]
    if not drawn:
        return Markup("")
    xs = [p.x for _, _, points in drawn for p in points]
    ys = [v for _, s, points in drawn for v in _trend_levels(s, points)]
    plot = _Plot(_session_axis(min(xs), max(xs)), nice_axis(min(ys), max(ys)))
    parts = [_frame(title, x_label, y_label), *_grid(plot)]
    parts += [_iqr_band(plot, points, style.color) for style, _, points in drawn]  # underneath every line and marker
    placer = _plot_area_placer()
    for style, s, _ in drawn:
        parts += _trend_guides(plot, s, style.color, placer)
    entries = []
    for style, s, points in drawn:
        parts += _median_line(plot, s.label, points, style)
        entries.append(legend.LegendEntry(s.label, legend.line_swatch(style.color, style.marker)))
        if _plottable(s.baseline, log=False):  # one series: its baseline needs no name
            name = f"{s.label} baseline" if len(drawn) > 1 else "baseline"
            entries.append(legend.LegendEntry(name, legend.line_swatch(style.color, dashed=True)))
    return _wrap_with_legend(parts, entries, "chart trend", title)


def _median_line(plot: _Plot, label: str, points: Sequence[TrendPoint], style: SeriesStyle) -> list[str]:
    """The line through the medians of ``points`` (from 2 points) and a marker with its tooltip on each."""
    line = [_polyline(plot, [(p.x, p.median) for p in points], style.color)] if len(points) > 1 else []
    return line + [marker_svg(style.marker, plot.px(p.x), plot.py(p.median), style.color, _trend_tooltip(label, p))
                   for p in points]


def _trend_points(series: TrendSeries) -> list[TrendPoint]:
    """The drawable points of ``series`` in x order, with quartiles that cannot be drawn set to None."""
    points = [p._replace(q1=p.q1 if _plottable(p.q1, log=False) else None,
                         q3=p.q3 if _plottable(p.q3, log=False) else None)
              for p in series.points if _plottable(p.x, log=False) and _plottable(p.median, log=False)]
    return sorted(points, key=lambda p: p.x)


def _trend_levels(series: TrendSeries, points: Sequence[TrendPoint]) -> list[float]:
    """Every y value a series draws: medians, known quartiles and its baseline."""
    levels = [v for p in points for v in (p.median, p.q1, p.q3) if v is not None]
    return [*levels, series.baseline] if _plottable(series.baseline, log=False) else levels


def _session_axis(first: float, last: float) -> Axis:
    """An x axis over session positions ``first..last`` padded by half a session (markers off the edge,
    room for a change-point line before the first session), with ticks at whole sessions labelled from 1
    (position 0 is session 1) at a 1-2-5 step of at least one session, at most ``MAX_DATA_TICKS`` of them."""
    low, high = _widen_if_flat(first - 0.5, last + 0.5)  # widens only beyond ~1e9 sessions, where 0.5 is lost
    first_number, last_number = math.ceil(low + 1), math.floor(high + 1)
    exponent = max(0, math.floor(math.log10(max(last_number - first_number, 1))) - 1)
    steps = (_multiple(1, mantissa, e) for e in count(exponent) for mantissa in NICE_MANTISSAS)
    step = next(s for s in steps if math.floor(last_number / s) - math.ceil(first_number / s) < MAX_DATA_TICKS)
    numbers = [k * step for k in range(math.ceil(first_number / step), math.floor(last_number / step) + 1)]
    return Axis(low, high, tuple(n - 1 for n in numbers), step=step, fixed_labels=tuple(_exact(n) for n in numbers))


def _trend_tooltip(series_label: str, point: TrendPoint) -> str:
    """``<series>, session <n>[, <label>]: median <m>[, q1–q3 <a>–<b>]`` (quartiles only when both are known)."""
    head = f"{series_label}, session {_exact(point.x + 1)}" + (f", {point.label}" if point.label else "")
    quartiles = f", q1–q3 {format_value(point.q1)}–{format_value(point.q3)}" if None not in (point.q1, point.q3) else ""
    return f"{head}: median {format_value(point.median)}{quartiles}"


def _trend_guides(plot: _Plot, series: TrendSeries, color: str, placer: _LabelPlacer) -> list[str]:
    """The baseline of ``series`` (if drawable) and its change points that fall within the x axis."""
    guides = [_baseline_line(plot, series, color)] if _plottable(series.baseline, log=False) else []
    return guides + [_change_point(plot, series.label, mark, color, placer) for mark in series.change_points
                     if _plottable(mark.x, log=False) and plot.x.low <= mark.x - 0.5 <= plot.x.high]


def _iqr_band(plot: _Plot, points: Sequence[TrendPoint], color: str) -> str:
    """A translucent polygon along q1 and back along q3 over the points with both; "" below 2 of them."""
    quartiles = [p for p in points if p.q1 is not None and p.q3 is not None]
    if len(quartiles) < 2:
        return ""
    outline = [(p.x, p.q1) for p in quartiles] + [(p.x, p.q3) for p in reversed(quartiles)]
    path = " ".join(f"{plot.px(x):.1f},{plot.py(y):.1f}" for x, y in outline)
    return f'<polygon points="{path}" class="band" fill="{color}" fill-opacity="0.18" stroke="none"/>'


def _baseline_line(plot: _Plot, series: TrendSeries, color: str) -> str:
    y = plot.py(series.baseline)
    return (f'<line x1="{MARGIN["left"]}" y1="{y:.1f}" x2="{MARGIN["left"] + PLOT_W}" y2="{y:.1f}" class="baseline" '
            f'stroke="{color}" stroke-width="1.5" stroke-dasharray="{BASELINE_DASH}">'
            f'<title>{escape(series.label)} baseline: {format_value(series.baseline)}</title></line>')


def _plot_area_placer() -> _LabelPlacer:
    """A label placer that keeps labels inside the plot: the margins left and right count as taken."""
    placer = _LabelPlacer()
    placer.boxes += [(-math.inf, -math.inf, MARGIN["left"], math.inf),
                     (MARGIN["left"] + PLOT_W, -math.inf, math.inf, math.inf)]
    return placer


def _change_point(plot: _Plot, series_label: str, mark: TrendMark, color: str, placer: _LabelPlacer) -> str:
    """A dashed vertical line halfway between session ``mark.x - 1`` and ``mark.x`` with a tooltip, and its
    label in the first of the top rows where it overlaps nothing (none if no row has room)."""
    x = plot.px(mark.x - 0.5)
    text = str(mark.label)
    tooltip = f"{series_label}: change before session {_exact(mark.x + 1)}" + (f": {text}" if text else "")
    line = (f'<line x1="{x:.1f}" y1="{MARGIN["top"]}" x2="{x:.1f}" y2="{MARGIN["top"] + PLOT_H}" class="changepoint" '
            f'stroke="{color}" stroke-width="1.5" stroke-dasharray="3 3"><title>{escape(tooltip)}</title></line>')
    if not text:
        return line
    rows = (placer.label(x, MARGIN["top"] + 7 + row * _LabelPlacer.HEIGHT, text) for row in range(CHANGE_LABEL_ROWS))
    return line + next((label for label in rows if label), "")
