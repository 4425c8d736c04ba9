"""What the session's verdicts could catch, as the report shows it: each judged figure's minimum detectable slowdown
(MDS, :mod:`hwregress.judge.reach`) in the per-test table and the what-regressed chart's tooltips, the summary line of
the report's top, and the tolerance each device kind was judged with
(docs/report.md, 'What this session would catch').

The summary line: ``M`` counts the judged tests (records with at least one reach: judged against a baseline entry),
``N`` those whose headline reach (:meth:`hwregress.store.results.TestRecord.headline_reach`: the throughput's where
judged) states a number, ``X`` the largest of those numbers: each of the ``N`` tests catches a slowdown of ``X`` or more
with at least the reach's power (90%), as its probability of catching grows with the slowdown. The median of the ``N``
is given beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.store.figures import ReachFigures
from hwregress.store.metrics import BY_NAME, Figure, figures_of
from hwregress.store.results import TestRecord

MIN_SESSIONS_KNOWN = 3  # recorded sessions below which the between-session spread is not known (judge.stats)


@dataclass(frozen=True)
class ReachCell:
    """One judged figure's entry in the table's "catches ≥" column: ``text`` (``8.1%``, ``latency +10.2%`` or
    ``none``), ``why_none`` (the sentence shown under ``none``) and ``title`` (the figures behind it, on hover)."""

    text: str
    why_none: str | None
    title: str


@dataclass(frozen=True)
class ReachSummary:
    """The summary line's figures (module doc): ``judged`` (M), ``stated`` (N), ``largest`` (X, a fraction) and
    ``median`` of the stated MDS (None when N is 0), and ``power``."""

    judged: int
    stated: int
    largest: float | None
    median: float | None
    power: float

    @property
    def without(self) -> int:
        """Judged tests that state no MDS."""
        return self.judged - self.stated

    def sentence(self) -> str:
        """The summary line in words (the report's top and the job summary), e.g. ``This session would catch a
        slowdown of ≥ 30.0% on 3 of 4 judged tests (each with 90% probability; median 12.0%); 1 states none.``"""
        if not self.judged:
            return "No test was judged against a baseline: this session states no slowdown it would catch."
        if self.stated:
            text = (f"This session would catch a slowdown of ≥ {self.largest:.1%} on {self.stated} of {self.judged} "
                    f"judged tests (each with {self.power:.0%} probability; median {self.median:.1%})")
        else:
            text = f"None of the {self.judged} judged tests states a slowdown it would catch"
        return text + (f"; {self.without} state{'s' if self.without == 1 else ''} none." if self.without else ".")


def reach_cells(record: TestRecord) -> list[ReachCell]:
    """The "catches ≥" entries of ``record``, one per judged figure, the throughput's first."""
    return [_cell(figure) for figure in figures_of(record) if isinstance(figure.reach, ReachFigures)]


def _cell(figure: Figure) -> ReachCell:
    found, label, sign = figure.reach, figure.label, figure.slowdown_sign
    if found.mds is None:
        return ReachCell(" ".join(filter(None, [label, "none"])), found.why_none, found.why_none or "")
    return ReachCell(" ".join(filter(None, [label, f"{sign}{found.mds:.1%}"])), None,
                     describe(found, figure.direction, label))


def describe(found: ReachFigures, direction: str | None = None, label: str | None = None) -> str:
    """The figures behind one reach in words, e.g. ``"a throughput 8.1% lower is caught with 90% probability
    (threshold 5.0%, Mann-Whitney α 0.01; within-session spread 3.0% over 10 rounds, between sessions 2.0% over 3
    sessions)"``. ``direction`` (``lower``: a slowdown raises the figure) and ``label`` (how it is named) default to the
    built-in figure's (a declared figure's reach gives its own: :func:`reach_cells` does)."""
    metric = BY_NAME.get(found.figure or "")
    figure = label or (metric.label if metric is not None and metric.label else found.figure) or "figure"
    lower = (direction or (metric.direction if metric is not None else "higher")) == "lower"
    grown = "longer" if figure == "latency" else "higher"
    change = f"{found.mds:.1%} {grown if lower else 'lower'}" if found.mds is not None else "?"
    rule = f"threshold {_pct(found.threshold)}" + (f", Mann–Whitney α {found.alpha:.2g}" if found.alpha else "")
    rounds = found.rounds[0] if found.rounds else "?"
    between = (f"between sessions {_pct(found.between)} over {found.sessions} sessions"
               if (found.sessions or 0) >= MIN_SESSIONS_KNOWN else
               f"between sessions not known yet ({found.sessions} recorded session(s), fewer than "
               f"{MIN_SESSIONS_KNOWN}: left out)")
    reference = (f", the reference's {_pct(found.reference_within)}" if found.reference_within is not None else "")
    return (f"a {figure} {change} is caught with {_pct(found.power, 0)} probability ({rule}; within-session spread "
            f"{_pct(found.within)} over {rounds} rounds{reference}, {between})")


def tooltip_text(found: ReachFigures | None) -> str:
    """The what-regressed chart's words for a dot's reach: ``catches a slowdown of ≥ 8.1% with 90% probability``, or
    ``no minimum detectable slowdown: <why>``; empty without a reach."""
    if found is None:
        return ""
    if found.mds is None:
        return f"no minimum detectable slowdown: {found.why_none}"
    return f"catches a slowdown of ≥ {found.mds:.1%} with {_pct(found.power, 0)} probability"


def reach_summary(records: Sequence[TestRecord]) -> ReachSummary:
    """The summary line's figures over ``records`` (module doc)."""
    headlines = [found for found in (r.headline_reach() for r in records) if found is not None]
    stated = [found.mds for found in headlines if found.mds is not None]
    power = next((found.power for found in headlines if found.power), 0.9)
    return ReachSummary(len(headlines), len(stated), max(stated) if stated else None,
                        statistics.median(stated) if stated else None, power)


def tolerance_by_kind(tolerances: Mapping[str, Any], records: Sequence[TestRecord]) -> str:
    """The throughput tolerance each device kind of ``records`` was judged with, e.g. ``"15.0% on the CPU, 5.0% on
    cuda"`` (``tolerances`` as the session's meta holds them: ``cpu_throughput`` on the CPU, ``throughput``
    elsewhere: :func:`hwregress.judge.tolerances.starting_tolerance`); both when no record names a device."""
    accelerator = tolerances.get("throughput")
    cpu = tolerances.get("cpu_throughput", accelerator)
    kinds = sorted({(r.device or "").split(":")[0] for r in records if r.device}, key=lambda k: (k != "cpu", k))
    if not kinds:
        return f"{_pct(cpu)} on the CPU, {_pct(accelerator)} on accelerators"
    return ", ".join(f"{_pct(cpu)} on the CPU" if kind == "cpu" else f"{_pct(accelerator)} on {kind}"
                     for kind in kinds)


def _pct(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}%}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"
