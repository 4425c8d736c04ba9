"""The history dashboard of ``python -m hwregress history render``: one static, self-contained page (inline CSS, SVG
and a few lines of JavaScript, no network) over every hardware key of a history folder.

Per test the y values are each session's median over the baseline median that session was judged against (a
session without a baseline: over the median of the first :data:`hwregress.judge.trends.REFERENCE_SESSIONS` sessions), so
machines of different speed share one axis and 1.0 is "as the baseline". Tests whose history moved
(:func:`hwregress.judge.trends.has_changed`: a regression, drift, improvement, accepted level or a significant change
point) are expanded: a trend chart with one series per hardware key, change points marked, and the change table of the
report's History section (first bad session and what changed). The others are one row each with a sparkline.

Per test the page also shows what each session's verdict could catch: its minimum detectable slowdown (the row's
``mds``, :mod:`hwregress.judge.reach`), the latest in a moved test's status line and in a steady row's column beside a
sparkline of it over the sessions, so a machine whose noise grows (and whose passes guarantee less) shows it.

Filters by hardware key, device, model, family and status run in the browser; without JavaScript the filter form
stays hidden and every test is shown.
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from hwregress import __version__
from hwregress.judge.trends import DEFAULT_TOLERANCE, REFERENCE_SESSIONS, STATUSES, Trend
from hwregress.report import _environment, charts, trend_chart
from hwregress.report.history_table import interrupted_note, status_counts
from hwregress.report.history_view import CHART_SESSIONS, STATUS_BADGE, TrendView, split_by_movement, trend_views

FACETS = (("key", "hardware key"), ("device", "device"), ("model", "model"), ("family", "family"), ("status", "status"))
UNKNOWN = "–"


@dataclass
class SteadyRow:
    """One (hardware key, test) whose history did not move: its ratios to the baseline and their sparkline, how
    many of its sessions did not run to their end (rows marked ``interrupted``), and each session's minimum
    detectable slowdown (None: not judged, none stated, or a row written before the field existed) with its
    sparkline (empty with fewer than 2 sessions stating one)."""

    trend: Trend
    ratios: list[float]
    sparkline: Markup
    facets: dict[str, list[str]]
    interrupted: int
    mds: list[float | None]
    mds_sparkline: Markup

    @property
    def latest_ratio(self) -> float | None:
        return self.ratios[-1] if self.ratios else None

    @property
    def latest_mds(self) -> float | None:
        return self.mds[-1] if self.mds else None


@dataclass
class KeySummary:
    """One hardware key of the folder: its devices, sessions, first and last session time and status counts."""

    hardware_key: str
    devices: list[str]
    sessions: int
    first: str
    last: str
    counts: str


@dataclass
class Dashboard:
    """What the page shows (see the module doc)."""

    keys: list[KeySummary]
    moved: list[tuple[TrendView, dict[str, list[str]]]]
    steady: list[SteadyRow]
    options: dict[str, list[str]] = field(default_factory=dict)


def render_dashboard(trends: Sequence[Trend], warnings: Sequence[str] = (), dirs: Sequence[str] = (),
                     tolerance: float = DEFAULT_TOLERANCE, generated_at: str | None = None) -> str:
    """The dashboard page as HTML text.

    Args:
        trends: the analysed histories (:func:`hwregress.judge.trends.load_trends`), any number of keys and tests.
        warnings: lines skipped while reading, shown as banners (at most 20).
        dirs: the history folders read, named on the page.
        tolerance: the smallest level change that set a status (fraction), named in the legend.
        generated_at: when the page was made (default: now, UTC, ISO 8601).
    """
    dashboard = build_dashboard(trends)
    return _environment().get_template("dashboard.html.j2").render(
        dashboard=dashboard, facets=FACETS, session_mds=session_mds, warnings=list(warnings)[:20], dirs=list(dirs),
        tolerance=tolerance,
        counts=status_counts(trends) if trends else "0 tests", status_badge=STATUS_BADGE, version=__version__,
        generated_at=generated_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def build_dashboard(trends: Sequence[Trend]) -> Dashboard:
    """The dashboard's content: per hardware key a summary, the moved test ids (worst first) with their ratio chart and
    change table, the steady (key, test) rows, and the values each filter offers."""
    moved_trends, steady_trends = split_by_movement(trends)
    moved = [(view, _merged_facets(view.trends)) for view in trend_views(moved_trends, chart=ratio_chart)]
    steady = [_steady_row(t) for t in steady_trends]
    options: dict[str, set[str]] = {name: set() for name, _ in FACETS}
    for facets in [f for _, f in moved] + [row.facets for row in steady]:
        for name, values in facets.items():
            options[name].update(values)
    ordered = {name: sorted(values,
                            key=lambda v: (STATUSES.index(v), v) if name == "status" and v in STATUSES else (99, v))
               for name, values in options.items()}
    return Dashboard(_key_summaries(trends), moved, steady, ordered)


def session_ratios(trend: Trend) -> list[float]:
    """Each session's median over its reference (see the module doc), in session order (dimensionless)."""
    return [row["median"] / reference for row, reference in zip(trend.rows, _references(trend), strict=True)]


def session_mds(trend: Trend) -> list[float | None]:
    """Each session's minimum detectable slowdown (fraction; None where the row has none), in session order."""
    return [value if _positive(value := row.get("mds")) else None for row in trend.rows]


def ratio_chart(test_id: str, trends: list[Trend]) -> Markup:
    """The trend chart of one test id's ratios to the baseline, one series per hardware key, the latest
    :data:`hwregress.report.history_view.CHART_SESSIONS` sessions, significant change points marked, 1.0 dashed."""
    series = [_ratio_series(trend) for trend in trends]
    return trend_chart.trend_chart(series, f"{test_id.rsplit('::', 1)[-1]}: median / baseline", "median / baseline")


def facets_of(trend: Trend) -> dict[str, str]:
    """The filter values of one trend, from its latest session: hardware key, device name (else the device),
    model, family (for rows written before the history kept it: the test function's name without ``test_``) and
    status."""
    row = trend.rows[-1]
    family = row.get("family") or trend.test_id.rsplit("::", 1)[-1].split("[", 1)[0].removeprefix("test_")
    return {"key": trend.hardware_key, "device": str(row.get("device_name") or row.get("device") or UNKNOWN),
            "model": str(row.get("model") or UNKNOWN), "family": str(family or UNKNOWN), "status": trend.status}


def _references(trend: Trend) -> list[float]:
    first = [row["median"] for row in trend.rows[:REFERENCE_SESSIONS]]
    fallback = statistics.median(first)
    return [baseline if _positive(baseline := row.get("baseline_median")) else fallback for row in trend.rows]


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _ratio_series(trend: Trend) -> trend_chart.TrendSeries:
    skipped = max(0, len(trend.rows) - CHART_SESSIONS)
    references = _references(trend)[skipped:]
    points = [trend_chart.TrendPoint(index, row["median"] / reference, _scaled(row.get("q1"), reference),
                                _scaled(row.get("q3"), reference),
                                f"{row['time']}, {row.get('verdict', '?')}{interrupted_note(row)}, median "
                                f"{charts.format_value(row['median'])} {trend.unit}")
              for index, (row, reference) in enumerate(zip(trend.rows[skipped:], references, strict=True))]
    marks = [trend_chart.TrendMark(item.change.index - skipped,
                                   f"{item.change.change:+.1%}, p={item.change.p_value:.2g}")
             for item in trend.changes if item.change.index > skipped and item.change.significant]
    return trend_chart.TrendSeries(trend.hardware_key, points, 1.0, marks)


def _scaled(value: Any, reference: float) -> float | None:
    return value / reference if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _steady_row(trend: Trend) -> SteadyRow:
    ratios = session_ratios(trend)
    shown = ratios[-CHART_SESSIONS:]
    spark = charts.sparkline(list(range(len(shown))), shown, "median / baseline", "")
    mds = session_mds(trend)
    mds_shown = [None if value is None else value * 100 for value in mds[-CHART_SESSIONS:]]
    mds_spark = charts.sparkline(list(range(len(mds_shown))), mds_shown, "MDS over sessions", "%")
    return SteadyRow(trend, ratios, spark, {name: [value] for name, value in facets_of(trend).items()},
                     sum(bool(interrupted_note(row)) for row in trend.rows), mds, mds_spark)


def _merged_facets(trends: Sequence[Trend]) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {name: [] for name, _ in FACETS}
    for trend in trends:
        for name, value in facets_of(trend).items():
            if value not in merged[name]:
                merged[name].append(value)
    return merged


def _key_summaries(trends: Sequence[Trend]) -> list[KeySummary]:
    summaries = []
    for key in sorted({t.hardware_key for t in trends}):
        own = [t for t in trends if t.hardware_key == key]
        rows = [row for t in own for row in t.rows]
        times = sorted(str(row["time"]) for row in rows)
        devices = sorted({str(row.get("device_name") or row.get("device") or UNKNOWN) for row in rows})
        summaries.append(KeySummary(key, devices, len({row["session"] for row in rows}), times[0], times[-1],
                                    status_counts(own)))
    return summaries
