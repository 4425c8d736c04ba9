"""Inline SVG charts for the report: no JavaScript library, no network, one self-contained page.

Every function returns ``markupsafe.Markup`` with all text escaped; numbers are plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup, escape

from hwregress import roofline

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
WIDTH, HEIGHT = 560, 300
MARGIN = {"left": 70, "right": 150, "top": 30, "bottom": 45}


def _axis(low: float, high: float, log: bool) -> tuple[float, float]:
    if log:
        low, high = math.log10(max(low, 1e-12)), math.log10(max(high, 1e-12))
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    pad = (high - low) * 0.05
    return low - pad, high + pad


def _scale(value: float, bounds: tuple[float, float], log: bool, pixels: float, invert: bool = False) -> float:
    value = math.log10(max(value, 1e-12)) if log else value
    fraction = (value - bounds[0]) / (bounds[1] - bounds[0])
    return pixels * (1 - fraction if invert else fraction)


def _ticks(bounds: tuple[float, float], log: bool, count: int = 5) -> list[float]:
    if log:
        return [10.0**e for e in range(math.ceil(bounds[0]), math.floor(bounds[1]) + 1)] or [10 ** bounds[0]]
    step = (bounds[1] - bounds[0]) / count
    return [bounds[0] + step * (i + 0.5) for i in range(count)]


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-2:
        return f"{value:.1e}"
    return f"{value:.3g}"


def line_chart(series: dict[str, Sequence[tuple[float, float]]], title: str, x_label: str, y_label: str,
               log_x: bool = False, log_y: bool = False, css_class: str = "chart",
               unmarked: frozenset[str] = frozenset()) -> Markup:
    """A multi-series line chart; ``series`` maps a legend label to (x, y) points. Series named in
    ``unmarked`` are drawn as plain lines (roofs), the others with a marker per point."""
    points = [p for values in series.values() for p in values if p[1] is not None]
    if not points:
        return Markup("")
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    x_bounds = _axis(min(p[0] for p in points), max(p[0] for p in points), log_x)
    y_low = min(p[1] for p in points) if log_y else 0.0
    y_bounds = _axis(y_low, max(p[1] for p in points), log_y)
    parts = [_frame(title, x_label, y_label)]
    distinct_x = sorted({p[0] for p in points})
    x_ticks = distinct_x if log_x and len(distinct_x) <= 8 else _ticks(x_bounds, log_x)  # batch sizes as ticks
    for tick in x_ticks:
        x = MARGIN["left"] + _scale(tick, x_bounds, log_x, plot_w)
        parts.append(f'<line x1="{x:.1f}" y1="{MARGIN["top"]}" x2="{x:.1f}" y2="{MARGIN["top"] + plot_h}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{MARGIN["top"] + plot_h + 15}" class="tick" text-anchor="middle">{_fmt(tick)}</text>')
    for tick in _ticks(y_bounds, log_y):
        y = MARGIN["top"] + _scale(tick, y_bounds, log_y, plot_h, invert=True)
        parts.append(f'<line x1="{MARGIN["left"]}" y1="{y:.1f}" x2="{MARGIN["left"] + plot_w}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{MARGIN["left"] - 5}" y="{y + 4:.1f}" class="tick" text-anchor="end">{_fmt(tick)}</text>')
    for index, (label, values) in enumerate(series.items()):
        color = PALETTE[index % len(PALETTE)]
        coords = [(MARGIN["left"] + _scale(x, x_bounds, log_x, plot_w),
                   MARGIN["top"] + _scale(y, y_bounds, log_y, plot_h, invert=True)) for x, y in sorted(values) if y is not None]
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        shown = [] if label in unmarked else sorted(v for v in values if v[1] is not None)
        for (x, y), (vx, vy) in zip(coords[: len(shown)], shown, strict=True):
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"><title>{escape(label)}: '
                         f'{_fmt(vx)}, {_fmt(vy)}</title></circle>')
        legend_y = MARGIN["top"] + 12 + index * 16
        parts.append(f'<rect x="{WIDTH - MARGIN["right"] + 10}" y="{legend_y - 9}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{WIDTH - MARGIN["right"] + 24}" y="{legend_y}" class="legend">{escape(label[:24])}</text>')
    return _wrap(parts, css_class, title)


def bar_chart(bars: Sequence[tuple[str, float]], title: str, value_label: str, css_class: str = "chart") -> Markup:
    """Horizontal bars, one per (label, value)."""
    if not bars:
        return Markup("")
    height = MARGIN["top"] + 22 * len(bars) + 30
    longest = max(v for _, v in bars) or 1.0
    plot_w = WIDTH - 200
    parts = [f'<text x="{WIDTH / 2}" y="18" class="title" text-anchor="middle">{escape(title)}</text>']
    for index, (label, value) in enumerate(bars):
        y = MARGIN["top"] + index * 22
        w = max(1.0, plot_w * value / longest)
        parts.append(f'<text x="175" y="{y + 13}" class="tick" text-anchor="end">{escape(label[:30])}</text>'
                     f'<rect x="180" y="{y}" width="{w:.1f}" height="16" fill="{PALETTE[index % len(PALETTE)]}">'
                     f'<title>{escape(label)}: {_fmt(value)} {escape(value_label)}</title></rect>'
                     f'<text x="{184 + w:.1f}" y="{y + 13}" class="tick">{_fmt(value)}</text>')
    parts.append(f'<text x="{180 + plot_w / 2}" y="{height - 6}" class="axis" text-anchor="middle">{escape(value_label)}</text>')
    return Markup(f'<svg class="{css_class}" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {height}" '
                  f'width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def stacked_bar(shares: dict[str, float], title: str) -> Markup:
    """One 100% bar split into named shares (fractions summing to about 1)."""
    if not shares:
        return Markup("")
    width, x = 420.0, 0.0
    parts = []
    for index, (name, share) in enumerate(sorted(shares.items(), key=lambda kv: -kv[1])):
        w = width * share
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="18" fill="{PALETTE[index % len(PALETTE)]}">'
                     f'<title>{escape(name)}: {share:.1%}</title></rect>')
        if w > 60:
            parts.append(f'<text x="{x + 4:.1f}" y="13" class="barlabel">{escape(name)} {share:.0%}</text>')
        x += w
    return Markup(f'<svg class="chart split" role="img" aria-label="{escape(title)}" viewBox="0 0 {width:.0f} 18" '
                  f'width="{width:.0f}" height="18" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def sparkline(times: Sequence[float], values: Sequence[float | None], label: str, unit: str) -> Markup:
    """A small line of one telemetry metric over the window, with its min and max."""
    points = [(t, v) for t, v in zip(times, values, strict=False) if v is not None]
    if len(points) < 2:
        return Markup("")
    width, height = 220, 40
    t0, t1 = points[0][0], points[-1][0]
    low, high = min(v for _, v in points), max(v for _, v in points)
    span_t, span_v = (t1 - t0) or 1.0, (high - low) or 1.0
    path = " ".join(f"{(t - t0) / span_t * width:.1f},{height - 4 - (v - low) / span_v * (height - 8):.1f}" for t, v in points)
    return Markup(f'<figure class="spark"><svg class="chart sparkline" role="img" aria-label="{escape(label)}" '
                  f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
                  f'<polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="1.5"/></svg>'
                  f'<figcaption>{escape(label)}: {_fmt(low)}–{_fmt(high)} {escape(unit)}</figcaption></figure>')


def roofline_chart(points: Sequence[tuple[str, float, float]], roofs: Sequence[tuple[str, float, float]],
                   title: str) -> Markup:
    """Log-log roofline: ``points`` are (label, FLOP/byte, TFLOP/s); ``roofs`` are (label, peak TFLOP/s,
    bandwidth TB/s), each drawn as min(peak, intensity x bandwidth)."""
    if not points or not roofs:
        return Markup("")
    intensities = [p[1] for p in points] + [roofline.ridge_point(r[1], r[2]) for r in roofs]
    x_range = (min(intensities) / 4, max(intensities) * 4)
    curves: dict[str, list[tuple[float, float]]] = {}
    for label, peak, bandwidth in roofs:
        xs = [x_range[0] * (x_range[1] / x_range[0]) ** (i / 40) for i in range(41)]
        curves[label] = [(x, roofline.attainable_tflops(x, peak, bandwidth)) for x in xs]
    for label, intensity, achieved in points:
        curves.setdefault(label, []).append((intensity, achieved))
    return line_chart(curves, title, "arithmetic intensity (FLOP/byte)", "TFLOP/s", log_x=True, log_y=True,
                      css_class="chart roofline", unmarked=frozenset(r[0] for r in roofs))


def _frame(title: str, x_label: str, y_label: str) -> str:
    center_x = (WIDTH - MARGIN["right"] + MARGIN["left"]) / 2
    center_y = MARGIN["top"] + (HEIGHT - MARGIN["top"] - MARGIN["bottom"]) / 2
    return (f'<text x="{center_x}" y="18" class="title" text-anchor="middle">{escape(title)}</text>'
            f'<text x="{center_x}" y="{HEIGHT - 6}" class="axis" text-anchor="middle">{escape(x_label)}</text>'
            f'<text transform="translate(14,{center_y}) rotate(-90)" class="axis" text-anchor="middle">{escape(y_label)}</text>')


def _wrap(parts: list[str], css_class: str, title: str) -> Markup:
    return Markup(f'<svg class="{css_class}" role="img" aria-label="{escape(title)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
                  f'width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')
