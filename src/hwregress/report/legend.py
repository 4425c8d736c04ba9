"""Chart legends that grow with their entries instead of cutting them: beside the plot while every entry fits
there, else in rows and columns below the plot, the SVG taller by as many rows as it takes. Every entry's text
carries its full label as a hover ``<title>``; only a label wider than the whole chart is shortened on screen."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from markupsafe import escape

from hwregress.report.palette import BASELINE_DASH, marker_svg

ROW_PX = 16
# conservative average glyph width (px) of the 10 px legend font (DejaVu Sans, Chromium's fallback sans-serif on
# Linux, averages ~6.1 px)
CHAR_PX = 6.2
SWATCH_PX = 16  # the swatch and the gap before its text
COLUMN_GAP_PX = 14
SIDE_PX = 10  # room kept free at the left and right edges of a legend below the plot


class LegendEntry(NamedTuple):
    """One legend entry: its ``label`` and a ``swatch(x, y)`` drawing its 12 px sample with the left edge at ``x``
    px, centred 4 px above the text baseline ``y`` px."""

    label: str
    swatch: Callable[[float, float], str]


def line_swatch(color: str, marker: str = "", dashed: bool = False) -> Callable[[float, float], str]:
    """A short line in ``color`` (``dashed``: the baseline dash) with a ``marker`` on it (none for "")."""
    def draw(x: float, y: float) -> str:
        dash = f' stroke-dasharray="{BASELINE_DASH}"' if dashed else ""
        line = f'<line x1="{x}" y1="{y - 4}" x2="{x + 12}" y2="{y - 4}" stroke="{color}" stroke-width="2"{dash}/>'
        return line + (marker_svg(marker, x + 6, y - 4, color, size=3, hollow=dashed) if marker else "")
    return draw


def marker_swatch(color: str, marker: str = "circle") -> Callable[[float, float], str]:
    """A single ``marker`` in ``color``."""
    return lambda x, y: marker_svg(marker, x + 6, y - 4, color, size=4)


def box_swatch(color: str, opacity: float = 1.0) -> Callable[[float, float], str]:
    """A 10 px square in ``color``."""
    return lambda x, y: f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}" fill-opacity="{opacity}"/>'


def text_px(text: str) -> float:
    """The width (px) ``text`` takes at the legend font, conservatively (:data:`CHAR_PX` per character)."""
    return len(text) * CHAR_PX


def layout(entries: Sequence[LegendEntry], width: float, side_x: float, top: float, plot_bottom: float,
           below_y: float) -> tuple[str, float]:
    """The legend's SVG elements and the lowest y (px) they reach.

    Beside the plot (entries from x ``side_x``, rows from y ``top`` down to ``plot_bottom``) when every entry fits
    there; else below the plot from y ``below_y``, in as many columns of the longest label as ``width`` holds.
    A label wider than the whole chart is cut with an ellipsis on screen; its ``<title>`` keeps it whole.
    """
    if not entries:
        return "", top
    side_room = width - side_x - SWATCH_PX - 2
    if len(entries) * ROW_PX <= plot_bottom - top and all(text_px(e.label) <= side_room for e in entries):
        rows = [(side_x, top + 12 + index * ROW_PX, e) for index, e in enumerate(entries)]
        return "".join(_entry(x, y, e, side_room) for x, y, e in rows), top + len(entries) * ROW_PX
    usable = width - 2 * SIDE_PX
    widest = max(text_px(e.label) for e in entries) + SWATCH_PX + COLUMN_GAP_PX
    columns = max(1, min(len(entries), int(usable // widest)))
    column_px = usable / columns
    placed = [(SIDE_PX + (i % columns) * column_px, below_y + 12 + (i // columns) * ROW_PX, e)
              for i, e in enumerate(entries)]
    room = column_px - SWATCH_PX - COLUMN_GAP_PX / 2
    bottom = below_y + math.ceil(len(entries) / columns) * ROW_PX + 4
    return "".join(_entry(x, y, e, room) for x, y, e in placed), bottom


def _entry(x: float, y: float, entry: LegendEntry, room_px: float) -> str:
    fit = max(1, int(room_px // CHAR_PX))
    shown = entry.label if len(entry.label) <= fit else entry.label[:fit - 1] + "…"
    return (f'{entry.swatch(x, y)}<text x="{x + SWATCH_PX:.1f}" y="{y:.1f}" class="legend">'
            f'<title>{escape(entry.label)}</title>{escape(shown)}</text>')
