"""Inline SVG charts for the report: no JavaScript library, no network, one self-contained page.

Every chart function returns ``markupsafe.Markup`` with all text escaped; numbers are plain floats.
Axes put their ticks at round numbers (:func:`nice_axis`) and label them compactly (:func:`tick_label`).
Figures that cannot be drawn (None, nan, inf, beyond 1e±30, or not positive on a log axis) are left out
of a chart; the tables of the report still show them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any, NamedTuple

from markupsafe import Markup, escape

from hwregress import roofline
from hwregress.report import legend, palette

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
WIDTH, HEIGHT = 560, 300
MARGIN = {"left": 70, "right": 150, "top": 30, "bottom": 45}
PLOT_W = WIDTH - MARGIN["left"] - MARGIN["right"]
PLOT_H = HEIGHT - MARGIN["top"] - MARGIN["bottom"]

NICE_MANTISSAS = (1, 2, 5)
MAX_LINEAR_TICKS = 8  # with the 1-2-5 steps this leaves 4 to 8 ticks on a linear axis
MAX_LOG_TICKS = 10
AXIS_LIMIT = 1e200  # nice_axis refuses bounds beyond this: 10**k stays a finite float for every tick
PLOT_LIMIT = 1e30  # no measured figure is this large; keeps every derived bound far inside AXIS_LIMIT
MAX_DATA_TICKS = 10  # at most this many distinct batch sizes get a tick each
_SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# conservative average glyph widths (px) of the chart fonts, to cut a text that would leave its SVG (DejaVu Sans,
# Chromium's fallback sans-serif on Linux, averages ~6.1 px at the 10 px legend and ~7.0 px at the 12 px bold title)
LEGEND_CHAR_PX = 6.2
TITLE_CHAR_PX = 7.2
BAR_LABEL_CHAR_PX = 6.2  # the 10 px tick font, as LEGEND_CHAR_PX
BAR_VALUE_ROOM = 46  # px right of a bar for its value label: 6 characters of the 10 px tick font and a gap


@dataclass(frozen=True)
class Axis:
    """One chart axis: bounds ``low < high`` (both > 0 on a log axis), the tick values within them, the
    tick step of a linear 1-2-5 axis (None otherwise) and optional fixed tick labels."""

    low: float
    high: float
    ticks: tuple[float, ...]
    log: bool = False
    step: float | None = None
    fixed_labels: tuple[str, ...] | None = None

    def fraction(self, value: float) -> float:
        """Where ``value`` falls on the axis: 0 at ``low``, 1 at ``high`` (in log10 on a log axis)."""
        if self.log:
            low, high = math.log10(self.low), math.log10(self.high)
            return (math.log10(value) - low) / (high - low)
        return (value - self.low) / (self.high - self.low)

    def labels(self) -> list[str]:
        """One compact label per tick, precise to a thousandth of the step (a millionth of a log tick)."""
        if self.fixed_labels is not None:
            return list(self.fixed_labels)
        return [tick_label(t, self.step * 1e-3 if self.step else abs(t) * 1e-6) for t in self.ticks]


def nice_axis(low: float, high: float, log: bool = False) -> Axis:
    """Bounds and ticks at round numbers that contain the data range ``[low, high]``.

    Linear: the ticks are the multiples of a step of 1, 2 or 5 x 10^k, 4 to 8 of them, and the bounds
    are the outermost ticks (Heckbert, "Nice numbers for graph labels", Graphics Gems, 1990; the rule of
    d3-array's ``ticks`` and matplotlib's ``MaxNLocator``). A flat range is widened around its value.
    Log: the bounds are powers of ten; up to 3 decades get ticks at 1, 2 and 5 x 10^k, more decades a
    tick every decade (or every few decades, at most 10 ticks).

    Raises:
        ValueError: a bound is not finite or beyond ±1e200, ``low > high``, or on a log axis a bound is
            below 1e-200 (including zero and negatives).
    """
    if not all(math.isfinite(v) and abs(v) <= AXIS_LIMIT for v in (low, high)) or low > high:
        raise ValueError(f"axis range [{low!r}, {high!r}] must be finite, within ±{AXIS_LIMIT:g} and ordered")
    if log:
        if low < 1 / AXIS_LIMIT:
            raise ValueError(f"log axis range [{low!r}, {high!r}] must be positive (at least {1 / AXIS_LIMIT:g})")
        return _log_axis(low, high)
    return _linear_axis(*_widen_if_flat(low, high))


def _widen_if_flat(low: float, high: float) -> tuple[float, float]:
    magnitude = max(abs(low), abs(high))
    if magnitude < 1e-150:  # zero, or too small for 1-2-5 steps in floating point
        low = -1.0 if low < 0 else 0.0
        return low, 1.0 if high > 0 or low == 0 else 0.0
    if high - low < magnitude * 1e-9:
        center = (low + high) / 2
        return center - abs(center) * 0.1, center + abs(center) * 0.1
    return low, high


def _multiple(index: int, mantissa: int, exponent: int) -> float:
    """``index x mantissa x 10^exponent``, dividing for negative exponents (0.1 is not exact, 10 is)."""
    if exponent >= 0:
        return index * mantissa * 10.0**exponent
    return index * mantissa / 10.0**-exponent


def _linear_axis(low: float, high: float) -> Axis:
    first_exponent = math.floor(math.log10(high - low)) - 1  # a step this fine always gives > 8 ticks
    for exponent in range(first_exponent, first_exponent + 3):
        for mantissa in NICE_MANTISSAS:
            first = math.floor(low / _multiple(1, mantissa, exponent))
            last = math.ceil(high / _multiple(1, mantissa, exponent))
            while _multiple(first, mantissa, exponent) > low:
                first -= 1
            while _multiple(last, mantissa, exponent) < high:
                last += 1
            if last - first + 1 <= MAX_LINEAR_TICKS:
                ticks = tuple(_multiple(i, mantissa, exponent) for i in range(first, last + 1))
                return Axis(ticks[0], ticks[-1], ticks, step=_multiple(1, mantissa, exponent))
    raise AssertionError(f"no 1-2-5 step for [{low}, {high}]")  # unreachable: 10^(first+2) > high - low


def _log_axis(low: float, high: float) -> Axis:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    while 10.0**first > low:  # log10 may round across a power of ten
        first -= 1
    while 10.0**last < high:
        last += 1
    last = max(last, first + 1)
    if last - first <= 3:
        ticks = [m * 10.0**k for k in range(first, last) for m in NICE_MANTISSAS] + [10.0**last]
        return Axis(10.0**first, 10.0**last, tuple(ticks), log=True)
    stride = next(s for s in count(1) if math.ceil(last / s) - math.floor(first / s) < MAX_LOG_TICKS)
    first, last = math.floor(first / stride) * stride, math.ceil(last / stride) * stride
    return Axis(10.0**first, 10.0**last, tuple(10.0**k for k in range(first, last + 1, stride)), log=True)


def data_axis(values: Sequence[float], log: bool) -> Axis:
    """An axis with a tick at each distinct value (batch sizes), padded so no point sits on the edge.
    More than ``MAX_DATA_TICKS`` distinct values get a :func:`nice_axis` instead.

    Raises:
        ValueError: as :func:`nice_axis`, for values it cannot place.
    """
    distinct = sorted(set(values))
    if len(distinct) > MAX_DATA_TICKS:
        return nice_axis(distinct[0], distinct[-1], log)
    low, high = (math.log10(distinct[0]), math.log10(distinct[-1])) if log else (distinct[0], distinct[-1])
    pad = 0.06 * (high - low) or (0.3 if log else max(abs(low) * 0.5, 1.0))
    low, high = low - pad, high + pad
    bounds = (10.0**low, 10.0**high) if log else (low, high)
    return Axis(bounds[0], bounds[1], tuple(distinct), log=log, fixed_labels=tuple(_exact(v) for v in distinct))


def tick_label(value: float, resolution: float) -> str:
    """The shortest compact text of ``value`` that is within ``resolution`` of it: ``0``, ``0.25``,
    ``750``, ``1.5k``, ``2.5M`` (SI prefixes k, M, G, T, P), ``3e-4`` below 0.01 and ``2e18`` from 1e18.
    A value not finite gives ``–``."""
    if not math.isfinite(value):
        return "–"
    resolution = max(resolution, abs(value) * 1e-15)
    if abs(value) <= resolution:
        return "0"
    if abs(value) < 1e-2 or abs(value) >= 1e18:
        return _exponent_label(value, resolution)
    scale, suffix = next(((s, p) for s, p in _SI_PREFIXES if abs(value) >= s), (1.0, ""))
    for decimals in range(17):
        text = f"{value / scale:.{decimals}f}"
        if abs(float(text) * scale - value) <= resolution:
            break
    return text + suffix


def _exponent_label(value: float, resolution: float) -> str:
    for digits in range(17):
        text = f"{value:.{digits}e}"
        if abs(float(text) - value) <= resolution:
            break
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_value(value: Any) -> str:
    """A figure for a tooltip or a bar: 3 significant digits, compact (see :func:`tick_label`)."""
    if not _is_number(value):
        return "–" if value is None or isinstance(value, float) else str(value)
    if value == 0:
        return "0"
    return tick_label(float(f"{value:.3g}"), abs(value) * 1e-4)


def _exact(value: float) -> str:
    """A count as written (``1024``, not ``1.02k``); other numbers as :func:`format_value`."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else format_value(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plottable(value: Any, log: bool) -> bool:
    if not _is_number(value) or abs(value) > PLOT_LIMIT:
        return False
    return value >= 1 / PLOT_LIMIT if log else True


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
        parts.append(f'<line x1="{x:.1f}" y1="{MARGIN["top"]}" x2="{x:.1f}" y2="{MARGIN["top"] + PLOT_H}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{MARGIN["top"] + PLOT_H + 15}" class="tick" text-anchor="middle">'
                     f'{escape(label)}</text>')
    for tick, label in zip(plot.y.ticks, plot.y.labels(), strict=True):
        y = plot.py(tick)
        parts.append(f'<line x1="{MARGIN["left"]}" y1="{y:.1f}" x2="{MARGIN["left"] + PLOT_W}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{MARGIN["left"] - 5}" y="{y + 4:.1f}" class="tick" text-anchor="end">{escape(label)}</text>')
    return parts


def _legend(index: int, label: str, color: str, shape: str) -> str:
    """One legend entry: ``shape`` is ``line`` (a roof), ``marker`` (measured points) or ``box``."""
    x, y = WIDTH - MARGIN["right"] + 10, MARGIN["top"] + 12 + index * 16
    if shape == "line":
        swatch = f'<line x1="{x}" y1="{y - 4}" x2="{x + 12}" y2="{y - 4}" stroke="{color}" stroke-width="2"/>'
    elif shape == "marker":
        swatch = f'<circle cx="{x + 6}" cy="{y - 4}" r="4" fill="{color}"/>'
    else:
        swatch = f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
    return (f'{swatch}<text x="{x + 16}" y="{y}" class="legend"><title>{escape(label)}</title>'
            f'{escape(fit_text(label, WIDTH - x - 16, LEGEND_CHAR_PX))}</text>')


def fit_text(text: str, width_px: float, char_px: float) -> str:
    """``text``, or its start and an ellipsis, in at most ``width_px`` pixels at ``char_px`` per character."""
    room = max(1, int(width_px // char_px))
    return text if len(text) <= room else text[:room - 1] + "…"


def _polyline(plot: _Plot, points: Sequence[tuple[float, float]], color: str, dash: str = "") -> str:
    path = " ".join(f"{plot.px(x):.1f},{plot.py(y):.1f}" for x, y in points)
    pattern = f' stroke-dasharray="{dash}" class="baseline"' if dash else ""
    return f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{pattern}/>'


def _marker(plot: _Plot, x: float, y: float, color: str, tooltip: str) -> str:
    return (f'<circle cx="{plot.px(x):.1f}" cy="{plot.py(y):.1f}" r="3.5" fill="{color}">'
            f'<title>{escape(tooltip)}</title></circle>')


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
                return f'<text x="{x:.1f}" y="{cy + 3:.1f}" class="ptlabel" text-anchor="{anchor}">{escape(text)}</text>'
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
    drawn, bottom = legend.layout(entries, WIDTH, WIDTH - MARGIN["right"] + 10, MARGIN["top"], MARGIN["top"] + PLOT_H, HEIGHT)
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
    parts.append(f'<text x="{180 + plot_w / 2}" y="{height - 6}" class="axis" text-anchor="middle">{escape(value_label)}</text>')
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
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="18" fill="{PALETTE[index % len(PALETTE)]}">'
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
                  f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
                  f'<line x1="0" y1="{height - 1}" x2="{width}" y2="{height - 1}" stroke="#ddd" stroke-width="1"/>'
                  f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="1.5"/></svg>'
                  f'<figcaption>{escape(label)}: {format_value(low)}–{format_value(high)} {escape(unit)}</figcaption></figure>')


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
    return [(x, roofline.attainable_tflops(x, roof.peak_tflops, roof.bandwidth_tb_s)) for x in (enters, ridge, plot.x.high)]


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
            f'<text transform="translate(14,{center_y}) rotate(-90)" class="axis" text-anchor="middle">{escape(y_label)}</text>')


def _wrap(parts: list[str], css_class: str, title: str, height: float = HEIGHT) -> Markup:
    return Markup(f'<svg class="{css_class}" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" '
                  f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


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
    session 1). Series keep their palette colour by their index in ``series``. Figures that cannot be
    drawn are left out (see :func:`_plottable`); empty Markup when no point can be drawn.
    """
    drawn = [(PALETTE[index % len(PALETTE)], s, _trend_points(s)) for index, s in enumerate(series)]
    drawn = [(color, s, points) for color, s, points in drawn if points]
    if not drawn:
        return Markup("")
    xs = [p.x for _, _, points in drawn for p in points]
    ys = [v for _, s, points in drawn for v in _trend_levels(s, points)]
    plot = _Plot(_session_axis(min(xs), max(xs)), nice_axis(min(ys), max(ys)))
    parts = [_frame(title, x_label, y_label), *_grid(plot)]
    parts += [_iqr_band(plot, points, color) for color, _, points in drawn]  # underneath every line and marker
    placer = _plot_area_placer()
    for color, s, _ in drawn:
        parts += _trend_guides(plot, s, color, placer)
    legend = count()
    for color, s, points in drawn:
        if len(points) > 1:
            parts.append(_polyline(plot, [(p.x, p.median) for p in points], color))
        parts += [_marker(plot, p.x, p.median, color, _trend_tooltip(s.label, p)) for p in points]
        parts.append(_legend(next(legend), s.label, color, "line"))
        if _plottable(s.baseline, log=False):
            parts.append(_dashed_legend(next(legend), s.label if len(drawn) > 1 else "", color))
    return _wrap(parts, "chart trend", title)


def _trend_points(series: TrendSeries) -> list[TrendPoint]:
    """The drawable points of ``series`` in x order, with quartiles that cannot be drawn set to None."""
    points = [p._replace(q1=p.q1 if _plottable(p.q1, log=False) else None, q3=p.q3 if _plottable(p.q3, log=False) else None)
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
            f'stroke="{color}" stroke-width="1.5" stroke-dasharray="6 4">'
            f'<title>{escape(series.label)} baseline: {format_value(series.baseline)}</title></line>')


def _plot_area_placer() -> _LabelPlacer:
    """A label placer that keeps labels inside the plot: the margins left and right count as taken."""
    placer = _LabelPlacer()
    placer.boxes += [(-math.inf, -math.inf, MARGIN["left"], math.inf), (MARGIN["left"] + PLOT_W, -math.inf, math.inf, math.inf)]
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


def _dashed_legend(index: int, series_label: str, color: str) -> str:
    """A legend entry (placed as :func:`_legend`) for a series' baseline: a dashed swatch and
    "<label> baseline" (just "baseline" for an empty label), the label shortened so that "baseline" stays
    visible within the legend's width."""
    x, y = WIDTH - MARGIN["right"] + 10, MARGIN["top"] + 12 + index * 16
    name = f"{series_label} baseline".strip()
    room = int((WIDTH - x - 16) // LEGEND_CHAR_PX)
    shown = name if len(name) <= room else f"{series_label[:room - len('… baseline')]}… baseline"
    return (f'<line x1="{x}" y1="{y - 4}" x2="{x + 12}" y2="{y - 4}" stroke="{color}" stroke-width="2" stroke-dasharray="3 2"/>'
            f'<text x="{x + 16}" y="{y}" class="legend"><title>{escape(name)}</title>{escape(shown)}</text>')
