"""The report's history section: per test whose history moved (:func:`hwregress.judge.trends.has_changed`) a trend
chart (session medians with their IQR band, change points, the baseline level) and, for each change point, the first
bad session with what changed since the session before it; the tests whose history did not move are one folded row
each, with a sparkline of their session medians, so that a tier of a hundred tests does not bury the few that moved.
Only significant change points (Welch p < 0.01) are drawn and listed: PELT also cuts a slow drift into steps whose
levels do not differ significantly, and those would suggest steps that are not there.

Several hardware keys' trends of one test id go in one chart, one series per key (``report merge``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from hwregress.judge.trends import DEFAULT_TOLERANCE, STATUSES, FirstBad, Trend, has_changed
from hwregress.report.charts import sparkline
from hwregress.report.history_table import interrupted_note
from hwregress.report.trend_chart import TrendMark, TrendPoint, TrendSeries, trend_chart

CHART_SESSIONS = 60  # the chart shows the latest sessions; the analysis reads its window (trends.TREND_WINDOW)
STATUS_BADGE = {"regression": "regression", "drift": "unstable", "improvement": "improvement", "accepted": "new",
                "steady": "pass", "short": "skipped"}


@dataclass
class HistorySection:
    """What the report shows of the history: the trends, the lines skipped while reading, what was read (history
    folders, the fleet store's URL with its password masked)."""

    trends: list[Trend] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE

    def context(self) -> dict[str, Any]:
        """The template variables of ``_history.html.j2``: the moved test ids' views (every hardware key of a test id
        that moved on any) and the steady trends' rows."""
        moved, steady = split_by_movement(self.trends)
        return {"history_views": trend_views(moved),
                "history_steady": [SteadyLine(t, _median_sparkline(t)) for t in steady],
                "history_warnings": self.warnings[:20], "history_sources": self.sources,
                "history_tolerance": self.tolerance, "status_badge": STATUS_BADGE}


@dataclass
class SteadyLine:
    """One (hardware key, test) whose history did not move, and the sparkline of its latest session medians."""

    trend: Trend
    sparkline: Markup


def _median_sparkline(trend: Trend) -> Markup:
    medians = [row["median"] for row in trend.rows[-CHART_SESSIONS:]]
    return sparkline(list(range(len(medians))), medians, "median", trend.unit or "")


@dataclass
class TrendView:
    """One test id's history across the hardware keys that ran it."""

    test_id: str
    trends: list[Trend]
    chart: Markup
    changes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def worst(self) -> str:
        return min((t.status for t in self.trends), key=STATUSES.index)


def split_by_movement(trends: Sequence[Trend]) -> tuple[list[Trend], list[Trend]]:
    """The trends of every test id whose history moved on any hardware key (:func:`has_changed`), and the others
    sorted by test id and hardware key."""
    moved_ids = {t.test_id for t in trends if has_changed(t)}
    steady = sorted((t for t in trends if t.test_id not in moved_ids), key=lambda t: (t.test_id, t.hardware_key))
    return [t for t in trends if t.test_id in moved_ids], steady


def trend_views(trends: Sequence[Trend], chart: Callable[[str, list[Trend]], Markup] | None = None) -> list[TrendView]:
    """One view per test id, worst status first; each change point of each key listed under it. ``chart`` draws a
    test id's trends (default: session medians with their IQR band, change points and baseline)."""
    chart = chart or _chart
    by_test: dict[str, list[Trend]] = {}
    for trend in trends:
        by_test.setdefault(trend.test_id, []).append(trend)
    views = [TrendView(test_id, group, chart(test_id, group),
                       [_change(t, item) for t in group for item in t.changes if item.change.significant])
             for test_id, group in by_test.items()]
    return sorted(views, key=lambda v: (STATUSES.index(v.worst), v.test_id))


def _chart(test_id: str, trends: list[Trend]) -> Markup:
    series = [_series(trend) for trend in trends]
    unit = next((t.unit for t in trends if t.unit), "")
    return trend_chart(series, f"{test_id.rsplit('::', 1)[-1]} over sessions", f"median ({unit})" if unit else "median")


def _series(trend: Trend) -> TrendSeries:
    skipped = max(0, len(trend.rows) - CHART_SESSIONS)
    rows = trend.rows[skipped:]
    points = [TrendPoint(index, row["median"], row.get("q1"), row.get("q3"),
                         f"{row['time']}, {row.get('verdict', '?')}, hwregress {row.get('hwregress_version', '?')}"
                         f"{interrupted_note(row)}")
              for index, row in enumerate(rows)]
    marks = [TrendMark(item.change.index - skipped, f"{item.change.change:+.1%}, p={item.change.p_value:.2g}")
             for item in trend.changes if item.change.index > skipped and item.change.significant]
    return TrendSeries(trend.hardware_key, points, trend.baseline, marks)


def _change(trend: Trend, item: FirstBad) -> dict[str, Any]:
    return {"hardware_key": trend.hardware_key, "change": item.change, "unit": trend.unit,
            "first_bad": item.first_bad, "last_good": item.last_good, "differences": item.differences}
