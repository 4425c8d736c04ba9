"""The page of ``python -m hwregress report compare A.json B.json``: session B judged against session A test by test
(:mod:`hwregress.judge.session_compare`), each test's per-round samples of both sessions on one axis, memory, energy and
telemetry side by side, and what differs between the machines and environments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from hwregress import __version__
from hwregress.judge.session_compare import NOT_COMPARED, SessionComparison, TestComparison
from hwregress.report import _environment, charts, palette
from hwregress.summary import summarize

STRIP_WIDTH, STRIP_HEIGHT = 300, 50
STRIP_MARGIN = {"left": 24, "right": 20, "top": 4, "bottom": 16}  # room for the row names and the edge tick labels
STRIP_ROWS = {"A": 14.0, "B": 28.0}  # y of each session's row of samples (px)
MOVED = ("regression", "improvement")


def render_compare(comparison: SessionComparison, labels: Sequence[str], sources: Sequence[str],
                   meta: Sequence[dict[str, Any]]) -> str:
    """The comparison page as HTML text.

    Args:
        comparison: B against A (:func:`hwregress.judge.session_compare.compare_sessions`).
        labels: the machine label of A and of B (:func:`hwregress.store.results.machine_label`).
        sources: the paths of the two results files, as given.
        meta: the two sessions' ``meta`` (host name, finish time).
    """
    rows = [_row(test) for test in comparison.tests]
    moved = [(_bar_label(t.test_id), t.throughput.ratio) for t in comparison.tests
             if t.verdict in MOVED and t.throughput is not None]
    return _environment().get_template("compare.html.j2").render(
        comparison=comparison, rows=rows, labels=labels, sources=sources, meta=meta, counts=comparison.counts(),
        moved_chart=charts.bar_chart(moved, "B / A median throughput of the regressions and improvements", "B / A"),
        not_compared=NOT_COMPARED, version=__version__)


def _bar_label(test_id: str) -> str:
    """``path::test_throughput[cpu-resnet18-infer-bs1-fp32]`` -> ``cpu-resnet18-infer-bs1-fp32`` (the parameters
    tell the bars apart; the function name is the same for most)."""
    name = test_id.rsplit("::", 1)[-1]
    return name.split("[", 1)[1].rstrip("]") if "[" in name and name.endswith("]") else name


def _row(test: TestComparison) -> dict[str, Any]:
    figures = test.judgement.figures if test.judgement is not None else None
    return {"test": test, "figures": figures, "strip": sample_strip(test.a.samples, test.b.samples, test.b.unit),
            "failures": test.judgement.failures if test.judgement else [],
            "notes": test.judgement.notes if test.judgement else []}


def sample_strip(a: Sequence[Any], b: Sequence[Any], unit: str) -> Markup:
    """The per-round samples of A (upper row) and B (lower row) as dots on one linear axis with round ticks
    (:func:`hwregress.report.axes.nice_axis`), each session's median a vertical bar. Figures that cannot be
    drawn are left out; empty Markup when neither side has one."""
    rows = {name: [float(v) for v in values if charts._plottable(v, log=False)]
            for name, values in (("A", a), ("B", b))}
    everything = [v for values in rows.values() for v in values]
    if not everything:
        return Markup("")
    axis = charts.nice_axis(min(everything), max(everything))
    plot_w = STRIP_WIDTH - STRIP_MARGIN["left"] - STRIP_MARGIN["right"]

    def x(value: float) -> float:
        return STRIP_MARGIN["left"] + axis.fraction(value) * plot_w

    bottom = STRIP_HEIGHT - STRIP_MARGIN["bottom"]
    parts = [f'<line x1="{x(t):.1f}" y1="{STRIP_MARGIN["top"]}" x2="{x(t):.1f}" y2="{bottom}" class="grid"/>'
             f'<text x="{x(t):.1f}" y="{STRIP_HEIGHT - 4}" class="tick" text-anchor="middle">{escape(label)}</text>'
             for t, label in zip(axis.ticks, axis.labels(), strict=True)]
    for index, (name, values) in enumerate(rows.items()):
        y, color = STRIP_ROWS[name], palette.PALETTE[index]
        parts.append(f'<text x="4" y="{y + 4:.1f}" class="tick">{name}</text>')
        parts += [f'<circle cx="{x(v):.1f}" cy="{y:.1f}" r="2.5" fill="{color}" fill-opacity="0.55"/>' for v in values]
        if values:
            median = summarize(values).median
            parts.append(f'<line x1="{x(median):.1f}" y1="{y - 6:.1f}" x2="{x(median):.1f}" y2="{y + 6:.1f}" '
                         f'stroke="{color}" stroke-width="2"><title>{name}: median {charts.format_value(median)} '
                         f'{escape(unit)} of {len(values)} rounds</title></line>')
    title = f"per-round samples ({unit}): A above, B below"
    return Markup(f'<svg class="chart strip" role="img" aria-label="{escape(title)}" viewBox="0 0 {STRIP_WIDTH} '
                  f'{STRIP_HEIGHT}" width="{STRIP_WIDTH}" height="{STRIP_HEIGHT}" xmlns="http://www.w3.org/2000/svg">'
                  f'<title>{escape(title)}</title>{"".join(parts)}</svg>')
