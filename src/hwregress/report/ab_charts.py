"""The A/B view's charts (:mod:`hwregress.report.ab_view`), inline SVG as the rest of the report
(:mod:`hwregress.report.charts`): the forest plot of B/A per test over the threshold band, and each test's pairs of
windows in time order."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

from hwregress.report import charts, legend
from hwregress.report.ab_rows import STACKS, ABRow, PairPoint
from hwregress.report.axes import Axis, format_value, nice_axis
from hwregress.report.palette import OKABE_ITO, SeriesStyle, marker_svg
from hwregress.report.regressed_chart import BAND_FILL, OTHER_STYLE, VERDICT_STYLE

# colour and shape per stack, so that neither depends on colour alone (Okabe-Ito: hwregress.report.palette)
STACK_STYLE = {"A": SeriesStyle(OKABE_ITO[0], "circle"), "B": SeriesStyle(OKABE_ITO[3], "square")}
WINDOW_OFFSET = 0.2  # pairs, how far left (first) or right (second) of its pair a window is drawn
UNDECIDED_REASON = "fewer than 2 pairs kept"

# the forest plot: a label column, then the ratio axis; one row per test
FOREST_WIDTH = 760
FOREST_LABEL_PX = 240  # right edge of the labels
FOREST_LEFT, FOREST_RIGHT = 250, FOREST_WIDTH - 30  # the plot's edges
FOREST_TOP, FOREST_ROW_PX = 30, 22
LABEL_CHAR_PX = 6.2  # the 10 px tick font (hwregress.report.legend.CHAR_PX)


# --- the forest plot -----------------------------------------------------------------------------------------

def forest_plot(rows: Sequence[ABRow], title: str = "B against A: ratio B/A per test, with its one-sided bounds"
                ) -> Markup:
    """One row per test (in ``rows``' order): its label; the band ``[1 - threshold, 1 + threshold]`` shaded; the
    ratio B/A as a dot coloured and shaped by verdict (as the what-regressed chart's,
    :data:`hwregress.report.regressed_chart.VERDICT_STYLE`) and its interval as a line from ``ratio_low`` to
    ``ratio_high``; a test without a ratio gets its message in place of the dot. A vertical line marks 1 (B as fast
    as A). Linear x axis over every ratio, bound and band edge. Empty Markup without rows."""
    if not rows:
        return Markup("")
    levels = [1.0, *(v for row in rows for v in (row.ratio, row.ratio_low, row.ratio_high, *(row.band or ()))
                     if v is not None)]
    axis = nice_axis(min(levels), max(levels))
    plot_w = FOREST_RIGHT - FOREST_LEFT

    def x(value: float) -> float:
        return FOREST_LEFT + axis.fraction(value) * plot_w

    bottom = FOREST_TOP + FOREST_ROW_PX * len(rows)
    parts = [f'<text x="{FOREST_WIDTH / 2}" y="18" class="title" text-anchor="middle">{escape(title)}</text>']
    for tick, label in zip(axis.ticks, axis.labels(), strict=True):
        parts.append(f'<line x1="{x(tick):.1f}" y1="{FOREST_TOP}" x2="{x(tick):.1f}" y2="{bottom}" class="grid"/>'
                     f'<text x="{x(tick):.1f}" y="{bottom + 15}" class="tick" text-anchor="middle">'
                     f'{escape(label)}</text>')
    tops = [FOREST_TOP + FOREST_ROW_PX * index for index in range(len(rows))]
    parts.extend(band for row, top in zip(rows, tops, strict=True) for band in _forest_band(row, top, x))
    parts.append(f'<line x1="{x(1.0):.1f}" y1="{FOREST_TOP - 4}" x2="{x(1.0):.1f}" y2="{bottom}" stroke="#444" '
                 f'stroke-width="1" class="ab-one"><title>ratio 1: B as fast as A</title></line>')
    for row, top in zip(rows, tops, strict=True):  # over the bands and the line at 1
        parts.extend(_forest_row(row, top, x))
    parts.append(f'<text x="{(FOREST_LEFT + FOREST_RIGHT) / 2}" y="{bottom + 32}" class="axis" text-anchor="middle">'
                 f'ratio B/A (throughput of B over A; below 1: B slower)</text>')
    drawn, legend_bottom = legend.layout(_forest_legend(rows), FOREST_WIDTH, FOREST_WIDTH, FOREST_TOP, FOREST_TOP,
                                         bottom + 38)
    height = math.ceil(legend_bottom) + 6
    return Markup(f'<svg class="chart ab-forest" role="img" aria-label="{escape(title)}" '
                  f'viewBox="0 0 {FOREST_WIDTH} {height}" width="{FOREST_WIDTH}" height="{height}" '
                  f'xmlns="http://www.w3.org/2000/svg">{"".join(parts)}{drawn}</svg>')


def _forest_row(row: ABRow, top: float, x: Callable[[float], float]) -> list[str]:
    middle = top + FOREST_ROW_PX / 2
    test_id = escape(row.record.test_id)
    shown = charts.fit_text(row.label, FOREST_LABEL_PX - 10, LABEL_CHAR_PX)
    parts = [f'<text x="{FOREST_LABEL_PX}" y="{middle + 4:.1f}" class="tick" text-anchor="end">'
             f'<title>{test_id}</title>{escape(shown)}</text>']
    color, shape = VERDICT_STYLE.get(row.verdict, OTHER_STYLE)
    if row.ratio is None:
        words = f"{row.label}: {row.verdict}, no ratio: {row.record.message or UNDECIDED_REASON}"
        shown = charts.fit_text(f"no ratio: {row.record.message or UNDECIDED_REASON}", FOREST_RIGHT - FOREST_LEFT - 8,
                                LABEL_CHAR_PX)
        return [*parts, f'<text x="{FOREST_LEFT + 4}" y="{middle + 4:.1f}" class="ab-none">'
                        f'<title>{escape(words)}</title>{escape(shown)}</text>']
    interval = _interval(row)
    if interval is not None:
        low, high = interval
        parts.append(f'<line x1="{x(low):.1f}" y1="{middle:.1f}" x2="{x(high):.1f}" y2="{middle:.1f}" '
                     f'stroke="{color}" stroke-width="2" class="ab-interval"><title>{escape(row.label)}: '
                     f'{_bounds_text(row)}</title></line>')
        parts.extend(f'<line x1="{x(end):.1f}" y1="{middle - 4:.1f}" x2="{x(end):.1f}" y2="{middle + 4:.1f}" '
                     f'stroke="{color}" stroke-width="2"/>' for end in (row.ratio_low, row.ratio_high)
                     if end is not None)
    parts.append(marker_svg(shape, x(row.ratio), middle, color, _dot_tooltip(row), size=4.5, css_class="dot"))
    return parts


def _forest_band(row: ABRow, top: float, x: Callable[[float], float]) -> list[str]:
    """The row's threshold band, the row's full height (equal thresholds join into one band down the plot)."""
    if row.band is None:
        return []
    low, high = row.band
    return [f'<rect x="{x(low):.1f}" y="{top:.1f}" width="{max(x(high) - x(low), 1.0):.1f}" height="{FOREST_ROW_PX}" '
            f'class="threshold-band" fill="{BAND_FILL}" fill-opacity="0.22">'
            f'<title>{escape(row.label)}: threshold band {low:.3g}–{high:.3g}</title></rect>']


def _interval(row: ABRow) -> tuple[float, float] | None:
    """From the lower bound (else the ratio) to the upper bound (else the ratio); None without either bound."""
    if row.ratio is None or (row.ratio_low is None and row.ratio_high is None):
        return None
    return (row.ratio_low if row.ratio_low is not None else row.ratio,
            row.ratio_high if row.ratio_high is not None else row.ratio)


def _bounds_text(row: ABRow) -> str:
    """``[0.88, 0.92]: one-sided 99.5% bounds (α = 0.005)``, or that there is no interval."""
    if row.ratio_low is None and row.ratio_high is None:
        return "no interval (too few pairs for the bounds)"
    alpha = f" (α = {row.alpha:.2g})" if row.alpha is not None else ""
    return f"[{format_value(row.ratio_low)}, {format_value(row.ratio_high)}]: one-sided {row.bounds_level} " \
           f"bounds{alpha}"


def _dot_tooltip(row: ABRow) -> str:
    band = f", band {row.band[0]:.3g}–{row.band[1]:.3g}" if row.band is not None else ""
    pairs = f", {row.pairs_kept} of {len(row.pairs)} pairs kept" if row.pairs_kept is not None else ""
    return f"{row.record.test_id}: {row.verdict}, ratio {format_value(row.ratio)} {_bounds_text(row)}{band}{pairs}"


def _forest_legend(rows: Sequence[ABRow]) -> list[legend.LegendEntry]:
    present = list(dict.fromkeys(row.verdict for row in rows if row.ratio is not None))
    entries = [legend.LegendEntry(v, legend.marker_swatch(*VERDICT_STYLE.get(v, OTHER_STYLE))) for v in present]
    if any(_interval(row) is not None for row in rows):
        entries.append(legend.LegendEntry("one-sided (1 − α) bounds", legend.line_swatch("#555")))
    if any(row.band is not None for row in rows):
        entries.append(legend.LegendEntry("threshold band", legend.box_swatch(BAND_FILL, 0.35)))
    return entries


# --- each test's pairs ---------------------------------------------------------------------------------------

def pairs_chart(row: ABRow) -> Markup:
    """One test's pairs in time order: x the pair's index, y the throughput in the row's unit (the measured range,
    not from zero: the drift between pairs is the point), A's window and B's in their :data:`STACK_STYLE`, the first
    of each pair drawn left of the second; a grey line joins a pair's two windows; a dropped pair's markers are hollow
    and say why; a failed window is a cross on the x axis, naming its error. Empty Markup when no window measured a
    throughput."""
    values = [v for pair in row.pairs for v in (pair.a, pair.b) if v is not None]
    if not values:
        return Markup("")
    indexes = [pair.index for pair in row.pairs]
    plot = charts._Plot(_pair_axis(min(indexes), max(indexes)), nice_axis(min(values), max(values)))
    title = f"{row.label} — pairs in time order"
    parts = [charts._frame(title, "pair, in time order (its first window left)", row.unit), *charts._grid(plot)]
    bottom = plot.py(plot.y.low)
    for pair in row.pairs:
        parts.extend(_pair_marks(plot, pair, bottom, row.unit))
    entries = [legend.LegendEntry(f"stack {stack}", legend.marker_swatch(*STACK_STYLE[stack])) for stack in STACKS]
    if row.dropped:
        entries.append(legend.LegendEntry("dropped (hollow)", _hollow_swatch()))
    if any(pair.value(stack) is None for pair in row.pairs for stack in STACKS):
        entries.append(legend.LegendEntry("failed window", lambda x, y: _cross(x + 6, y - 4, "#555", "")))
    return charts._wrap_with_legend(parts, entries, "chart ab-pairs", title)


def _pair_axis(first: int, last: int) -> Axis:
    """Whole pair indexes with room for the windows drawn beside each: ticks at round counts (at least 1 apart)."""
    nice = nice_axis(first, max(last, first + 1))
    step = max(1.0, nice.step or 1.0)
    low, high = first - 0.5, last + 0.5
    ticks = tuple(t for t in nice.ticks if low <= t <= high and float(t).is_integer() and t % step == 0)
    return Axis(low, high, ticks or (float(first),), step=step)


def _pair_marks(plot: charts._Plot, pair: PairPoint, bottom: float, unit: str) -> list[str]:
    first = pair.first()
    where = {stack: pair.index + (0.0 if first is None else -WINDOW_OFFSET if stack == first else WINDOW_OFFSET)
             for stack in STACKS}
    dropped = f"; dropped: {pair.dropped}" if pair.dropped is not None else ""
    parts = []
    if pair.a is not None and pair.b is not None:
        dash = ' stroke-dasharray="2 2"' if pair.dropped is not None else ""
        parts.append(f'<line x1="{plot.px(where["A"]):.1f}" y1="{plot.py(pair.a):.1f}" x2="{plot.px(where["B"]):.1f}" '
                     f'y2="{plot.py(pair.b):.1f}" stroke="#bbb" stroke-width="1"{dash}/>')
    for stack in STACKS:
        value, (color, shape) = pair.value(stack), STACK_STYLE[stack]
        if value is None:
            error = pair.error(stack) or "no throughput recorded"
            parts.append(_cross(plot.px(where[stack]), bottom - 5, color,
                                f"{pair.name}, {stack}: the window failed: {error}{dropped}"))
            continue
        tooltip = f"{pair.name}, {stack}: {format_value(value)} {unit}{dropped}"
        parts.append(marker_svg(shape, plot.px(where[stack]), plot.py(value), color, tooltip,
                                hollow=pair.dropped is not None, css_class=f"ab-{stack.lower()}"))
    return parts


def _cross(cx: float, cy: float, color: str, tooltip: str, size: float = 4.0) -> str:
    """A failed window: an x of ``size`` px from centre to corner, in ``color``, with ``tooltip``."""
    title = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    css = ' class="ab-failed"' if tooltip else ""
    lines = "".join(f'<line x1="{cx - size:.1f}" y1="{cy + s * size:.1f}" x2="{cx + size:.1f}" '
                    f'y2="{cy - s * size:.1f}" stroke="{color}" stroke-width="2"/>' for s in (1, -1))
    return f"<g{css}>{title}{lines}</g>"


def _hollow_swatch() -> Callable[[float, float], str]:
    return lambda x, y: marker_svg("circle", x + 6, y - 4, "#555", size=4, hollow=True)
