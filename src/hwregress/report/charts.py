"""Inline SVG charts for the report: no JavaScript library, no network, one self-contained page.

Every chart function returns ``markupsafe.Markup`` with all text escaped; numbers are plain floats.
Axes put their ticks at round numbers and label them compactly (:mod:`hwregress.report.axes`); the history's
trend chart is in :mod:`hwregress.report.trend_chart`. Figures that cannot be drawn (None, nan, inf, beyond 1e±30, or
not positive on a log axis) are left out of a chart; the tables of the report still show them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from markupsafe import Markup, escape

from hwregress.hardware import roofline
from hwregress.report import legend, palette

# the axis helpers are package-internal (report/), not API
from hwregress.report.axes import Axis, _exact, _is_number, _plottable, data_axis, format_value, nice_axis

WIDTH, HEIGHT = 560, 300
MARGIN = {"left": 70, "right": 150, "top": 30, "bottom": 45}
PLOT_W = WIDTH - MARGIN["left"] - MARGIN["right"]
PLOT_H = HEIGHT - MARGIN["top"] - MARGIN["bottom"]

# conservative average glyph widths (px) of the chart fonts, to cut a text that would leave its SVG (DejaVu Sans,
# Chromium's fallback sans-serif on Linux, averages ~6.1 px at the 10 px legend and ~7.0 px at the 12 px bold title)
TITLE_CHAR_PX = 7.2
BAR_LABEL_CHAR_PX = 6.2  # the 10 px tick font, as the legend's (hwregress.report.legend.CHAR_PX)
BAR_VALUE_ROOM = 46  # px right of a bar for its value label: 6 characters of the 10 px tick font and a gap


@dataclass(frozen=True)
class _Plot:
    """The plot area of a chart: data coordinates to SVG pixels."""

    x: Axis
    y: Axis

    def px(self, value: float) -> float:
        return MARGIN["left"] + self.x.fraction(value) * PLOT_W

    def py(self, value: float) -> float:
        return MARGIN["top"] + (1 - self.y.fraction(value)) * PLOT_H


def _grid(plot: _Plot) -> list[str]:
    parts = []
    for tick, label in zip(plot.x.ticks, plot.x.labels(), strict=True):
        x = plot.px(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{MARGIN["top"]}" x2="{x:.1f}" '
                     f'y2="{MARGIN["top"] + PLOT_H}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{MARGIN["top"] + PLOT_H + 15}" class="tick" text-anchor="middle">'
                     f'{escape(label)}</text>')
    for tick, label in zip(plot.y.ticks, plot.y.labels(), strict=True):
        y = plot.py(tick)
        parts.append(f'<line x1="{MARGIN["left"]}" y1="{y:.1f}" x2="{MARGIN["left"] + PLOT_W}" '
                     f'y2="{y:.1f}" class="grid"/>'
                     f'<text x="{MARGIN["left"] - 5}" y="{y + 4:.1f}" class="tick" '
                     f'text-anchor="end">{escape(label)}</text>')
    return parts


def fit_text(text: str, width_px: float, char_px: float) -> str:
    """``text``, or its start and an ellipsis, in at most ``width_px`` pixels at ``char_px`` per character."""
    room = max(1, int(width_px // char_px))
    return text if len(text) <= room else text[:room - 1] + "…"


def _polyline(plot: _Plot, points: Sequence[tuple[float, float]], color: str, dash: str = "") -> str:
    path = " ".join(f"{plot.px(x):.1f},{plot.py(y):.1f}" for x, y in points)
    pattern = f' stroke-dasharray="{dash}" class="baseline"' if dash else ""
    return f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{pattern}/>'


class _LabelPlacer:
    """Small text labels beside markers, right of the marker or else left of it; a label that would
    overlap one already placed is left out (the marker's tooltip still names it)."""

    CHAR_WIDTH, HEIGHT = 5.2, 9.0  # px, for the 9 px .ptlabel font

    def __init__(self) -> None:
        self.boxes: list[tuple[float, float, float, float]] = []

    def label(self, cx: float, cy: float, text: str) -> str:
        width = len(text) * self.CHAR_WIDTH
        for x0, anchor in ((cx + 6, "start"), (cx - 6 - width, "end")):
            box = (x0, cy - 6, x0 + width, cy - 6 + self.HEIGHT)
            if all(box[2] <= b[0] or b[2] <= box[0] or box[3] <= b[1] or b[3] <= box[1] for b in self.boxes):
                self.boxes.append(box)
                x = x0 if anchor == "start" else x0 + width
                return (f'<text x="{x:.1f}" y="{cy + 3:.1f}" class="ptlabel" '
                        f'text-anchor="{anchor}">{escape(text)}</text>')
        return ""


def line_chart(series: dict[str, Sequence[tuple[Any, Any]]], title: str, x_label: str, y_label: str,
               log_x: bool = False, log_y: bool = False, css_class: str = "chart",
               ticks_at_data_x: bool = False, baselines: dict[str, Sequence[tuple[Any, Any]]] | None = None) -> Markup:
    """A multi-series line chart with a marker per point; ``series`` maps a legend label to (x, y)
    points, ``baselines`` a series' label to its baseline's (x, y) points, drawn dashed in the series' style
    beside it (one "baseline" legend entry for all). A linear y axis starts at zero. ``ticks_at_data_x`` puts an
    x tick at each distinct x (batch sizes) instead of round numbers. Each series has its own style
    (:func:`hwregress.report.palette.series_style`); the legend grows below the plot when it does not fit beside it
    (:mod:`hwregress.report.legend`). Empty Markup when no point can be drawn."""
    def drawable(values: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        return sorted((x, y) for x, y in values if _plottable(x, log_x) and _plottable(y, log_y))

    clean = {label: drawable(values) for label, values in series.items()}
    clean = {label: values for label, values in clean.items() if values}
    if not clean:
        return Markup("")
    dashed = {label: drawable((baselines or {}).get(label, ())) for label in clean}
    points = [p for values in (*clean.values(), *dashed.values()) for p in values]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x_axis = data_axis(xs, log_x) if ticks_at_data_x else nice_axis(min(xs), max(xs), log_x)
    y_axis = nice_axis(min(ys), max(ys), True) if log_y else nice_axis(min(0.0, min(ys)), max(0.0, max(ys)))
    plot = _Plot(x_axis, y_axis)
    parts = [_frame(title, x_label, y_label), *_grid(plot)]
    entries = []
    for index, (label, values) in enumerate(clean.items()):
        style = palette.series_style(index)
        if dashed[label]:
            parts.append(_polyline(plot, dashed[label], style.color, palette.BASELINE_DASH))
            parts.extend(palette.marker_svg(style.marker, plot.px(x), plot.py(y), style.color,
                                            f"{label} baseline: {format_value(x)}, {format_value(y)}", hollow=True)
                         for x, y in dashed[label])
        if len(values) > 1:
            parts.append(_polyline(plot, values, style.color))
        parts.extend(palette.marker_svg(style.marker, plot.px(x), plot.py(y), style.color,
                                        f"{label}: {format_value(x)}, {format_value(y)}") for x, y in values)
        entries.append(legend.LegendEntry(label, legend.line_swatch(style.color, style.marker)))
    if any(dashed.values()):
        entries.append(legend.LegendEntry("baseline (dashed)", legend.line_swatch("#555", "circle", dashed=True)))
    return _wrap_with_legend(parts, entries, css_class, title)


def _wrap_with_legend(parts: list[str], entries: Sequence[legend.LegendEntry], css_class: str, title: str) -> Markup:
    """:func:`_wrap` with the legend beside the plot, or below it in an SVG grown to hold it."""
    drawn, bottom = legend.layout(entries, WIDTH, WIDTH - MARGIN["right"] + 10, MARGIN["top"], MARGIN["top"] + PLOT_H,
                                  HEIGHT)
    return _wrap([*parts, drawn], css_class, title, height=max(HEIGHT, math.ceil(bottom) + 6))


def bar_chart(bars: Sequence[tuple[str, Any]], title: str, value_label: str, css_class: str = "chart") -> Markup:
    """Horizontal bars, one per (label, value); values that are not finite numbers are left out."""
    bars = [(label, value) for label, value in bars if _plottable(value, log=False)]
    if not bars:
        return Markup("")
    height = MARGIN["top"] + 22 * len(bars) + 30
    longest = max(v for _, v in bars) or 1.0
    plot_w = WIDTH - 180 - BAR_VALUE_ROOM  # the longest bar's value label must end inside the SVG
    parts = [f'<text x="{WIDTH / 2}" y="18" class="title" text-anchor="middle">{escape(title)}</text>']
    for index, (label, value) in enumerate(bars):
        y = MARGIN["top"] + index * 22
        w = max(1.0, plot_w * value / longest)
        parts.append(f'<text x="175" y="{y + 13}" class="tick" text-anchor="end"><title>{escape(label)}</title>'
                     f'{escape(fit_text(label, 170, BAR_LABEL_CHAR_PX))}</text>'
                     f'<rect x="180" y="{y}" width="{w:.1f}" height="16" fill="{palette.series_style(index).color}">'
                     f'<title>{escape(label)}: {format_value(value)} {escape(value_label)}</title></rect>'
                     f'<text x="{184 + w:.1f}" y="{y + 13}" class="tick">{format_value(value)}</text>')
    parts.append(f'<text x="{180 + plot_w / 2}" y="{height - 6}" class="axis" '
                 f'text-anchor="middle">{escape(value_label)}</text>')
    return Markup(f'<svg class="{css_class}" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" '
                  f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def stacked_bar(shares: dict[str, Any], title: str) -> Markup:
    """One 100% bar split into named shares (fractions summing to about 1); others are left out."""
    shares = {name: share for name, share in shares.items() if _plottable(share, log=False) and 0 < share <= 1}
    if not shares:
        return Markup("")
    width, x = 420.0, 0.0
    parts = []
    for index, (name, share) in enumerate(sorted(shares.items(), key=lambda kv: -kv[1])):
        w = min(width * share, width - x)
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="18" fill="{palette.series_style(index).color}">'
                     f'<title>{escape(name)}: {share:.1%}</title></rect>')
        if w > 60:
            parts.append(f'<text x="{x + 4:.1f}" y="13" class="barlabel">{escape(name)} {share:.0%}</text>')
        x += w
    return Markup(f'<svg class="chart split" role="img" aria-label="{escape(title)}" viewBox="0 0 {width:.0f} 18" '
                  f'width="{width:.0f}" height="18" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def sparkline(times: Sequence[Any], values: Sequence[Any], label: str, unit: str) -> Markup:
    """A small line of one telemetry metric over the window, with its min and max, above a faint baseline rule; a
    metric that did not change (a flat line) is drawn at mid-height."""
    points = [(t, v) for t, v in zip(times, values, strict=False) if _plottable(t, False) and _plottable(v, False)]
    if len(points) < 2:
        return Markup("")
    width, height = 220, 40
    t0, t1 = points[0][0], points[-1][0]
    low, high = min(v for _, v in points), max(v for _, v in points)
    span_t = (t1 - t0) or 1.0

    def y(value: float) -> float:
        return height / 2 if high == low else height - 4 - (value - low) / (high - low) * (height - 8)

    path = " ".join(f"{(t - t0) / span_t * width:.1f},{y(v):.1f}" for t, v in points)
    return Markup(f'<figure class="spark"><svg class="chart sparkline" role="img" aria-label="{escape(label)}" '
                  f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
                  'xmlns="http://www.w3.org/2000/svg">'
                  f'<line x1="0" y1="{height - 1}" x2="{width}" y2="{height - 1}" stroke="#ddd" stroke-width="1"/>'
                  f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="1.5"/></svg>'
                  f'<figcaption>{escape(label)}: {format_value(low)}–{format_value(high)} '
                  f'{escape(unit)}</figcaption></figure>')


class RooflinePoint(NamedTuple):
    """One measured test on a roofline: ``label`` names its group (model, mode, dtype), ``batch_size``
    its batch (None: unlabelled), ``intensity`` in FLOP/byte, ``tflops`` achieved TFLOP/s."""

    label: str
    batch_size: Any
    intensity: Any
    tflops: Any


class Roof(NamedTuple):
    """One roof: ``peak_tflops`` in TFLOP/s and ``bandwidth_tb_s`` in TB/s."""

    label: str
    peak_tflops: Any
    bandwidth_tb_s: Any


def roofline_chart(points: Sequence[RooflinePoint], roofs: Sequence[Roof], title: str) -> Markup:
    """Log-log roofline (Williams, Waterman & Patterson, CACM 2009): each roof is a line
    min(peak, intensity x bandwidth); each measured test is a marker labelled ``bs=N``, never joined to
    the other batch sizes of its model. Empty Markup without a drawable point and roof."""
    points = [p for p in points if _plottable(p.intensity, True) and _plottable(p.tflops, True)]
    roofs = [r for r in roofs if _plottable(r.peak_tflops, True) and _plottable(r.bandwidth_tb_s, True)]
    if not points or not roofs:
        return Markup("")
    intensities = [p.intensity for p in points] + [roofline.ridge_point(r.peak_tflops, r.bandwidth_tb_s) for r in roofs]
    tflops = [p.tflops for p in points] + [r.peak_tflops for r in roofs]
    # the memory slope continues below the plot: the y axis spans the measurements and the peaks only
    plot = _Plot(nice_axis(min(intensities) / 2, max(intensities) * 2, log=True),
                 nice_axis(min(tflops) / 4, max(tflops) * 2, log=True))
    parts = [_frame(title, "arithmetic intensity (FLOP/byte)", "TFLOP/s"), *_grid(plot)]
    entries = []
    for index, roof in enumerate(roofs):
        color = palette.series_style(index).color
        parts.append(_polyline(plot, _roof_line(roof, plot), color))
        entries.append(legend.LegendEntry(roof.label, legend.line_swatch(color)))
    groups = list(dict.fromkeys(p.label for p in points))
    placer = _LabelPlacer()
    for offset, group in enumerate(groups, start=len(roofs)):
        style = palette.series_style(offset)
        parts += [_roofline_marker(plot, p, style, placer) for p in points if p.label == group]
        entries.append(legend.LegendEntry(group, legend.marker_swatch(style.color, style.marker)))
    return _wrap_with_legend(parts, entries, "chart roofline", title)


def _roof_line(roof: Roof, plot: _Plot) -> list[tuple[float, float]]:
    """The roof within the plot: where it enters (left edge or bottom edge), the ridge point, the right
    edge; exact, no sampling. The roof's peak lies within the y axis by construction."""
    enters = min(max(plot.x.low, plot.y.low / roof.bandwidth_tb_s), plot.x.high)
    ridge = min(max(roofline.ridge_point(roof.peak_tflops, roof.bandwidth_tb_s), enters), plot.x.high)
    return [(x, roofline.attainable_tflops(x, roof.peak_tflops, roof.bandwidth_tb_s))
            for x in (enters, ridge, plot.x.high)]


def _roofline_marker(plot: _Plot, point: RooflinePoint, style: palette.SeriesStyle, placer: _LabelPlacer) -> str:
    batch = f"bs={_exact(point.batch_size)}" if _is_number(point.batch_size) else ""
    name = f"{point.label}, {batch}" if batch else point.label
    tooltip = f"{name}: {format_value(point.intensity)} FLOP/byte, {format_value(point.tflops)} TFLOP/s"
    marker = palette.marker_svg(style.marker, plot.px(point.intensity), plot.py(point.tflops), style.color, tooltip)
    return marker + placer.label(plot.px(point.intensity), plot.py(point.tflops), batch) if batch else marker


def _frame(title: str, x_label: str, y_label: str) -> str:
    center_x = (WIDTH - MARGIN["right"] + MARGIN["left"]) / 2
    center_y = MARGIN["top"] + PLOT_H / 2
    shown = fit_text(title, 2 * min(center_x, WIDTH - center_x), TITLE_CHAR_PX)  # centred: the nearer edge bounds it
    hover = f"<title>{escape(title)}</title>" if shown != title else ""
    return (f'<text x="{center_x}" y="18" class="title" text-anchor="middle">{hover}{escape(shown)}</text>'
            f'<text x="{center_x}" y="{HEIGHT - 6}" class="axis" text-anchor="middle">{escape(x_label)}</text>'
            f'<text transform="translate(14,{center_y}) rotate(-90)" class="axis" '
            f'text-anchor="middle">{escape(y_label)}</text>')


def _wrap(parts: list[str], css_class: str, title: str, height: float = HEIGHT) -> Markup:
    return Markup(f'<svg class="{css_class}" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" '
                  f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')
