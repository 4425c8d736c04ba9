"""Series styles for the report's charts: colour-blind-safe colours that never repeat a look within a chart.

The colours are Okabe & Ito's 8 ("Color Universal Design", https://jfly.uni-koeln.de/color/, 2008), then Paul Tol's
muted (9) and light (8) qualitative sets (https://personal.sron.nl/~pault/ "Colour schemes", 2021; the pale grey each
set keeps for bad data is left out): 25 colours distinguishable under the common colour-vision deficiencies within
each set. Past the 25, a series keeps the colours' order and changes its marker shape (circle, square, triangle,
diamond, inverted triangle), so 125 series have 125 different looks; dashes are kept for baselines
(:data:`BASELINE_DASH`), so a measured line is always solid.
"""

from __future__ import annotations

from typing import NamedTuple

from markupsafe import escape

OKABE_ITO = ("#0072B2", "#D55E00", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
TOL_MUTED = ("#332288", "#CC6677", "#117733", "#882255", "#44AA99", "#999933", "#AA4499", "#88CCEE", "#DDCC77")
TOL_LIGHT = ("#77AADD", "#EE8866", "#44BB99", "#BBCC33", "#AAAA00", "#FFAABB", "#99DDFF", "#EEDD88")
PALETTE = OKABE_ITO + TOL_MUTED + TOL_LIGHT
MARKERS = ("circle", "square", "triangle", "diamond", "triangle-down")
BASELINE_DASH = "6 4"  # a series' baseline: its colour, dashed, hollow markers


class SeriesStyle(NamedTuple):
    """How one series is drawn: ``color`` (#rrggbb) and ``marker`` (one of :data:`MARKERS`)."""

    color: str
    marker: str


def series_style(index: int) -> SeriesStyle:
    """The style of the ``index``-th series (from 0) of a chart: distinct for every index below
    ``len(PALETTE) * len(MARKERS)`` (125).

    Raises:
        ValueError: ``index`` is negative.
    """
    if index < 0:
        raise ValueError(f"series index {index} must be >= 0 (the position of the series in its chart)")
    lap, position = divmod(index, len(PALETTE))
    return SeriesStyle(PALETTE[position], MARKERS[lap % len(MARKERS)])


def marker_svg(shape: str, cx: float, cy: float, color: str, tooltip: str = "", size: float = 3.5,
               hollow: bool = False, css_class: str = "") -> str:
    """One marker of ``shape`` (see :data:`MARKERS`) centred on (``cx``, ``cy``) px, ``size`` px from centre to edge,
    filled with ``color`` (``hollow``: outlined only), with ``tooltip`` as its hover ``<title>``."""
    paint = f'fill="#fff" stroke="{color}" stroke-width="1.5"' if hollow else f'fill="{color}"'
    extra = f' class="{css_class}"' if css_class else ""
    title = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    s = size
    if shape == "square":
        corner = f'x="{cx - s * 0.9:.1f}" y="{cy - s * 0.9:.1f}"'
        head = f'<rect {corner} width="{s * 1.8:.1f}" height="{s * 1.8:.1f}" {paint}{extra}'
        return f"{head}>{title}</rect>"
    corners = {"triangle": ((0, -1.2), (1.1, 0.9), (-1.1, 0.9)), "triangle-down": ((0, 1.2), (1.1, -0.9), (-1.1, -0.9)),
               "diamond": ((0, -1.3), (1.3, 0), (0, 1.3), (-1.3, 0))}.get(shape)
    if corners is None:
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{s}" {paint}{extra}>{title}</circle>'
    points = " ".join(f"{cx + dx * s:.1f},{cy + dy * s:.1f}" for dx, dy in corners)
    return f'<polygon points="{points}" {paint}{extra}>{title}</polygon>'
