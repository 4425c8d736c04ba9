"""A bisection's page (``python -m hwregress bisect`` writes it as ``<work-dir>/bisect.html``): the outcome, the line
of candidates with each probe against the good endpoint placed on it (the ratio B/A with its interval, over the
threshold band), every candidate's side, and every probe in a table.

It reads the bisection's JSON document (``hwregress.cli.bisect.bisection_json``): ``status``, ``exit_code``, ``kind``,
``candidates`` (ids) and ``labels``, ``culprit``, ``last_good``, ``first_bad`` (ids or None), ``probes`` (each with
``candidate``, ``reference``, ``side``, ``skipped``, and where it ran ``verdict``, ``ratio``, ``ratio_low``,
``ratio_high``, ``pairs``, ``seconds``), ``skipped`` and ``settings`` (``threshold``, ``looks``, ``pytest_args``).
A figure that is missing or None is drawn as "–", never an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from hwregress.report import legend
from hwregress.report.axes import nice_axis
from hwregress.report.palette import marker_svg
from hwregress.report.record_values import number

SIDE_STYLE = {"good": ("#009E73", "circle"), "bad": ("#D55E00", "triangle-down"),
              "undecided": ("#E69F00", "diamond"), "skip": ("#777777", "square"), "untested": ("#dddddd", "circle")}
LEFT, RIGHT_MARGIN, TOP, PLOT_H, STRIP_H = 60, 20, 30, 220, 14
MIN_WIDTH, STEP_PX, MAX_WIDTH = 560, 36, 1100
LABEL_CHAR_PX = 6.2


@dataclass(frozen=True)
class ProbeRow:
    """One probe as the table shows it."""

    number: int
    candidate: str
    reference: str
    against: str  # "good" or "bad"
    side: str
    verdict: str | None
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    pairs: int | None
    seconds: float | None
    skipped: str | None


def render_bisection(document: Mapping[str, Any]) -> str:
    """The page of a bisection's JSON document (module doc).

    Raises:
        ValueError: the document lacks ``candidates``, ``labels`` or ``probes``, or its lists disagree in length;
            names what is missing.
    """
    from hwregress.report import _environment  # the package's environment: its filters and bytecode cache

    ids, labels = _candidates(document)
    index = {candidate: position for position, candidate in enumerate(ids)}
    rows = [_row(number, probe, index, labels) for number, probe in enumerate(document["probes"], start=1)]
    sides = candidate_sides(document, ids)
    settings = document.get("settings") or {}
    threshold = _number(settings.get("threshold"))
    chart = ladder_chart(labels, sides, [r for r in rows if r.against == "good"], index_of(rows, labels), threshold)
    return _environment().get_template("bisect.html.j2").render(
        document=document, labels=labels, ids=ids, rows=rows, sides=sides, chart=chart, settings=settings,
        culprit_label=_label_of(document.get("culprit"), index, labels),
        last_good_label=_label_of(document.get("last_good"), index, labels),
        first_bad_label=_label_of(document.get("first_bad"), index, labels),
        seconds=sum(r.seconds or 0.0 for r in rows))


def _candidates(document: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    for key in ("candidates", "labels", "probes"):
        if not isinstance(document.get(key), list):
            raise ValueError(f"the bisection document has no list {key!r} (write it with python -m hwregress bisect "
                             "--json)")
    ids, labels = [str(c) for c in document["candidates"]], [str(c) for c in document["labels"]]
    if len(ids) != len(labels) or len(ids) < 2:
        raise ValueError(f"the bisection document names {len(ids)} candidates and {len(labels)} labels (at least "
                         "2 of each, as many labels as candidates)")
    return ids, labels


def _row(number: int, probe: Mapping[str, Any], index: Mapping[str, int], labels: list[str]) -> ProbeRow:
    candidate, reference = str(probe.get("candidate")), str(probe.get("reference"))
    against = "good" if index.get(reference) == 0 else "bad"
    pairs = probe.get("pairs")
    return ProbeRow(number, _label_of(candidate, index, labels) or candidate,
                    _label_of(reference, index, labels) or reference, against, str(probe.get("side") or "–"),
                    probe.get("verdict"), _number(probe.get("ratio")), _number(probe.get("ratio_low")),
                    _number(probe.get("ratio_high")), pairs if isinstance(pairs, int) else None,
                    _number(probe.get("seconds")), probe.get("skipped"))


def index_of(rows: Sequence[ProbeRow], labels: list[str]) -> dict[int, int]:
    """Each probe's number -> its candidate's position on the line."""
    position = {label: i for i, label in enumerate(labels)}
    return {row.number: position.get(row.candidate, -1) for row in rows}


def candidate_sides(document: Mapping[str, Any], ids: list[str]) -> list[str]:
    """Each candidate's side as the search left it: ``good`` up to the last good, ``bad`` from the first bad on (when
    the endpoints differed), else the side its own probes gave, ``skip`` for a skipped one, ``untested`` otherwise."""
    sides = ["untested"] * len(ids)
    position = {candidate: i for i, candidate in enumerate(ids)}
    for probe in document.get("probes") or []:
        at = position.get(str(probe.get("candidate")))
        if at is not None and probe.get("side") in SIDE_STYLE and sides[at] in ("untested", "undecided"):
            sides[at] = str(probe["side"])
    last_good = position.get(str(document.get("last_good")), 0)
    first_bad = position.get(str(document.get("first_bad")))
    for at in range(len(ids)):
        if at <= last_good:
            sides[at] = "good"
        elif first_bad is not None and at >= first_bad:
            sides[at] = "bad"
    for candidate in document.get("skipped") or {}:
        if candidate in position:
            sides[position[candidate]] = "skip"
    return sides


def ladder_chart(labels: Sequence[str], sides: Sequence[str], probes: Sequence[ProbeRow], positions: Mapping[int, int],
                 threshold: float | None) -> Markup:
    """The line of candidates (x, in order) and each probe against the good endpoint (y: B/A, its interval a
    vertical line), over the band ``[1 - threshold, 1 + threshold]``; below the plot a strip of each candidate's side
    (:data:`SIDE_STYLE`), numbered as the candidates table numbers them, the culprit's boundary marked between the
    last good and the first bad."""
    count = len(labels)
    width = min(MAX_WIDTH, max(MIN_WIDTH, LEFT + RIGHT_MARGIN + STEP_PX * count))
    plot_w = width - LEFT - RIGHT_MARGIN
    levels = [1.0, *(v for p in probes for v in (p.ratio, p.ratio_low, p.ratio_high) if v is not None)]
    if threshold is not None:
        levels += [1 - threshold, 1 + threshold]
    axis = nice_axis(min(levels), max(levels))

    def x(position: float) -> float:
        return LEFT + (position + 0.5) / count * plot_w

    def y(value: float) -> float:
        return TOP + (1 - axis.fraction(value)) * PLOT_H

    bottom = TOP + PLOT_H
    title = "Each probe against the good endpoint: B/A with its interval, on the line of candidates"
    parts = [f'<text x="{width / 2:.0f}" y="18" class="title" text-anchor="middle">{escape(title)}</text>']
    for tick, label in zip(axis.ticks, axis.labels(), strict=True):
        parts.append(f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{width - RIGHT_MARGIN}" y2="{y(tick):.1f}" '
                     f'class="grid"/><text x="{LEFT - 6}" y="{y(tick) + 3:.1f}" class="tick" text-anchor="end">'
                     f'{escape(label)}</text>')
    if threshold is not None:
        top, low = y(1 + threshold), y(1 - threshold)
        parts.append(f'<rect x="{LEFT}" y="{top:.1f}" width="{plot_w}" height="{max(low - top, 1.0):.1f}" '
                     f'class="threshold-band" fill="#888888" fill-opacity="0.18"><title>the threshold band '
                     f'{1 - threshold:.3g}–{1 + threshold:.3g}: inside it, "the same"</title></rect>')
    parts.append(f'<line x1="{LEFT}" y1="{y(1.0):.1f}" x2="{width - RIGHT_MARGIN}" y2="{y(1.0):.1f}" stroke="#444"/>')
    parts += _boundary(sides, x, bottom)
    for probe in probes:
        parts += _probe_marks(probe, x(positions.get(probe.number, 0)), y)
    parts += _side_strip(labels, sides, x, bottom + 8, count, plot_w)
    parts.append(f'<text x="{LEFT - 44}" y="{TOP + PLOT_H / 2:.0f}" class="axis" text-anchor="middle" '
                 f'transform="rotate(-90 {LEFT - 44} {TOP + PLOT_H / 2:.0f})">B/A against good</text>')
    entries = [legend.LegendEntry(side, legend.marker_swatch(*SIDE_STYLE[side])) for side in SIDE_STYLE
               if side in sides or any(p.side == side for p in probes)]
    strip_bottom = bottom + 8 + STRIP_H + 16
    drawn, legend_bottom = legend.layout(entries, width, width, TOP, TOP, strip_bottom + 8)
    height = math.ceil(legend_bottom) + 6
    return Markup(f'<svg class="chart bisect-line" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
                  f'{height}" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
                  f'{"".join(parts)}{drawn}</svg>')


def _probe_marks(probe: ProbeRow, cx: float, y: Any) -> list[str]:
    if probe.ratio is None:
        return []
    color, shape = SIDE_STYLE.get(probe.side, SIDE_STYLE["untested"])
    words = (f"probe {probe.number}: {probe.candidate} against {probe.reference}: {probe.verdict}, B/A "
             f"{probe.ratio:.3f}{_bounds(probe)}, {probe.pairs} pairs, {probe.seconds or 0:.0f} s ({probe.side})")
    parts = []
    if probe.ratio_low is not None and probe.ratio_high is not None:
        parts.append(f'<line x1="{cx:.1f}" y1="{y(probe.ratio_high):.1f}" x2="{cx:.1f}" y2="{y(probe.ratio_low):.1f}" '
                     f'stroke="{color}" stroke-width="2" class="probe-interval"><title>{escape(words)}</title></line>')
    parts.append(marker_svg(shape, cx, y(probe.ratio), color, words, size=4.5, css_class="probe"))
    return parts


def _boundary(sides: Sequence[str], x: Any, bottom: float) -> list[str]:
    """A dashed line between the last good and the first bad candidate where they are neighbours (the culprit)."""
    for at in range(1, len(sides)):
        if sides[at - 1] == "good" and sides[at] == "bad":
            cx = x(at - 0.5)
            return [f'<line x1="{cx:.1f}" y1="{TOP}" x2="{cx:.1f}" y2="{bottom + 8 + STRIP_H}" stroke="#D55E00" '
                    f'stroke-dasharray="4 3" class="culprit-boundary"><title>the change: between the last good and '
                    f'the first bad</title></line>']
    return []


def _side_strip(labels: Sequence[str], sides: Sequence[str], x: Any, top: float, count: int,
                plot_w: float) -> list[str]:
    cell = plot_w / count
    parts = []
    for at, (label, side) in enumerate(zip(labels, sides, strict=True)):
        color = SIDE_STYLE.get(side, SIDE_STYLE["untested"])[0]
        parts.append(f'<rect x="{x(at) - cell / 2 + 1:.1f}" y="{top:.1f}" width="{max(cell - 2, 1):.1f}" '
                     f'height="{STRIP_H}" fill="{color}" class="side side-{side}"><title>{escape(label)}: {side}'
                     f'</title></rect>')
        if cell >= 2 * LABEL_CHAR_PX * len(str(at)) or at in (0, count - 1):  # the candidates table's numbers
            parts.append(f'<text x="{x(at):.1f}" y="{top + STRIP_H + 11:.1f}" class="tick" text-anchor="middle">'
                         f'<title>{escape(label)}</title>{at}</text>')
    return parts


def _bounds(probe: ProbeRow) -> str:
    if probe.ratio_low is None or probe.ratio_high is None:
        return ""
    return f" [{probe.ratio_low:.3f}, {probe.ratio_high:.3f}]"


def _label_of(candidate: Any, index: Mapping[str, int], labels: list[str]) -> str | None:
    at = index.get(str(candidate)) if candidate is not None else None
    return None if at is None else labels[at]


def _number(value: Any) -> float | None:
    """:func:`hwregress.report.record_values.number` as a float: a finite real number, else None."""
    found = number(value)
    return None if found is None else float(found)
