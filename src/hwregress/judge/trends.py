"""What the session history says per test: its change points, the first bad session of each with what changed,
and whether the latest level is a regression, an accepted new level, or a slow drift no single run flagged.

Per test (one hardware key, one test id, its latest ``TREND_WINDOW`` sessions in time order; the store keeps every
session, and the change-point search costs ~k^2 in the sessions it reads):

- **Change points**: :func:`hwregress.judge.changepoints.change_points` on the session medians (ruptures PELT; the
  size and Welch p-value of each shift). A change counts for the status when it is significant
  (``p < 0.01``) and at least ``tolerance`` in size.
- **First bad session** of each change: the first session after it, with the difference against the session
  before it (software fingerprint, hwregress version, packages, hardware identity, window telemetry): the
  range to bisect.
- **Level now**: the median of the latest segment's medians; when that segment trends (Mann-Kendall: Kendall's
  tau of medians against session order, ``p < 0.01``, at least ``MIN_TREND_SESSIONS`` sessions), the Theil-Sen
  line's value at the latest session instead (Sen 1968: the median of pairwise slopes, robust to odd sessions).
- **Reference**: the baseline median the latest session was judged against; without one, the level of the
  first segment (first ``REFERENCE_SESSIONS`` sessions when there is no change point).
- **Moved**: the level now is beyond ``tolerance`` from the reference and the latest segment differs from it
  significantly (against a baseline: one-sample t-test of its log medians; against the first segment: Welch's
  test), or the sessions since the baseline was recorded trend (Mann-Kendall) to a level beyond ``tolerance``
  (a slow drift that PELT cut into steps each too short to test).
- **Status**:
  ``regression``   moved down, and a session of the latest segment failed its own verdict (a step or a slide
                   the per-run threshold saw);
  ``drift``        moved down, and no session of the latest segment failed its own verdict: the slow regression
                   (or a step under the per-run threshold) that only the history shows;
  ``improvement``  moved up;
  ``accepted``     not moved, but the latest change point is significant and at least ``tolerance``, and the
                   baseline was re-recorded after it (``--update-baselines=reset``): a new level, accepted;
  ``steady``       none of these; ``short`` with fewer than ``MIN_SESSIONS`` sessions.
"""

from __future__ import annotations

import datetime as _dt
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from hwregress.judge.changepoints import SIGNIFICANCE_ALPHA, ChangePoint, change_points, welch_p_value
from hwregress.judge.session_diff import PackageLookup, differences
from hwregress.store.history import HistoryStore, parse_time, unreadable
from hwregress.store.history_row import HistoryRow

DEFAULT_TOLERANCE = 0.05
MIN_SESSIONS = 3
MIN_TREND_SESSIONS = 4
TREND_WINDOW = 365  # the latest sessions a trend analyses: PELT's cost grows ~k^2 (docs/history.md)
REFERENCE_SESSIONS = 3
STATUSES = ("regression", "drift", "improvement", "accepted", "steady", "short")
MOVED_STATUSES = ("regression", "drift", "improvement", "accepted")  # a status that says the level changed


@dataclass
class FirstBad:
    """One change point with the sessions on either side of it and what differed between them."""

    change: ChangePoint
    last_good: dict[str, Any]
    first_bad: dict[str, Any]
    differences: list[str]


@dataclass
class Trend:
    """The history of one test on one hardware key, analysed (see the module doc)."""

    test_id: str
    hardware_key: str
    unit: str
    rows: list[dict[str, Any]]
    changes: list[FirstBad] = field(default_factory=list)
    status: str = "short"
    level_now: float | None = None
    reference: float | None = None
    reference_source: str = ""
    drift: float | None = None
    drift_p_value: float | None = None
    slope_per_session: float | None = None
    summary: str = ""
    earlier_rows: list[dict[str, Any]] = field(default_factory=list, repr=False)  # before the window, not analysed
    window: int | None = TREND_WINDOW  # the sessions analysed at most (None: every one)

    @property
    def earlier_sessions(self) -> int:
        """How many sessions precede the analysed window (``rows``)."""
        return len(self.earlier_rows)

    @property
    def baseline(self) -> float | None:
        """The baseline median the latest session was judged against (None: no baseline)."""
        return self.rows[-1].get("baseline_median") if self.rows else None


def group_rows(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Rows by (hardware key, test id), each list in time order (file order among equal times)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["hardware_key"], row["test_id"]), []).append(row)
    epoch = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    return {key: sorted(group, key=lambda r: parse_time(r["time"]) or epoch) for key, group in groups.items()}


def analyze(rows: Sequence[dict[str, Any]], tolerance: float = DEFAULT_TOLERANCE,
            packages: PackageLookup | None = None, window: int | None = TREND_WINDOW) -> Trend:
    """Analyse the rows of one test on one hardware key (time order, as :func:`group_rows` gives them).

    Args:
        rows: history rows (:mod:`hwregress.store.history`), all of one test and one hardware key, k >= 1.
        tolerance: smallest relative change that sets a status (fraction, e.g. 0.05).
        packages: package hash -> ``name==version`` list (:meth:`HistoryStore.packages`), to name the packages
            that changed at a change point; None: name only that the hash changed.
        window: analyse only the latest ``window`` sessions (>= ``MIN_SESSIONS``; the trend's ``rows``, the rest its
            ``earlier_rows``); None: every session. The change-point search costs ~k^2 in the sessions analysed.

    Raises:
        ValueError: ``rows`` is empty, ``tolerance`` is not in (0, 1), or ``window`` is under ``MIN_SESSIONS``.
    """
    if not rows:
        raise ValueError("no history rows to analyse")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance {tolerance!r} must be a fraction in (0, 1), e.g. 0.05")
    if window is not None and window < MIN_SESSIONS:
        raise ValueError(f"window {window!r} must be a number of sessions >= {MIN_SESSIONS} (None: every session)")
    earlier = max(0, len(rows) - window) if window is not None else 0
    first = rows[earlier]
    trend = Trend(first["test_id"], first["hardware_key"], str(first.get("unit") or ""), list(rows[earlier:]),
                  earlier_rows=list(rows[:earlier]), window=window)
    rows = trend.rows
    medians = [float(row["median"]) for row in rows]
    trend.changes = [FirstBad(change, rows[change.index - 1], rows[change.index],
                              differences(rows[change.index - 1], rows[change.index], packages))
                     for change in change_points(medians)]
    if len(rows) < MIN_SESSIONS:
        trend.summary = f"{len(rows)} session(s): too few for a trend (at least {MIN_SESSIONS})"
        return trend
    _judge(trend, medians, tolerance)
    if earlier:
        trend.summary += f"; analysed the latest {len(rows)} of {len(rows) + earlier} sessions"
    return trend


def _judge(trend: Trend, medians: list[float], tolerance: float) -> None:
    latest = trend.changes[-1] if trend.changes else None
    start = latest.change.index if latest else 0
    logs = np.log(np.asarray(medians, dtype=float))
    trend.level_now, trend.slope_per_session = _level_now(logs[start:])
    trend.reference, trend.reference_source, trend.drift_p_value = _reference(trend, logs, start)
    trend.drift = trend.level_now / trend.reference - 1.0
    moved = abs(trend.drift) > tolerance and trend.drift_p_value < SIGNIFICANCE_ALPHA
    if not moved:
        moved = _slid(trend, logs, tolerance)
    flagged = sum(row.get("verdict") == "regression" for row in trend.rows[start:])
    if not moved:
        stepped = latest is not None and latest.change.significant and abs(latest.change.change) >= tolerance
        trend.status = "accepted" if stepped and latest is not None and _accepted(trend, latest) else "steady"
    else:
        trend.status = "improvement" if trend.drift > 0 else "regression" if flagged else "drift"
    trend.summary = _sentence(trend, latest, len(medians) - start, flagged)
    _latest_session_red(trend, tolerance)


def _latest_session_red(trend: Trend, tolerance: float) -> None:
    """A latest session that its own verdict judged a regression, by more than ``tolerance`` below its baseline,
    makes the status ``regression`` whatever the series says: one session makes no change point (PELT needs a
    segment), so a test that just fell to a quarter of its baseline would otherwise read ``steady`` until the next
    sessions confirm it. The drop is the session's ``ratio``, else its median over its ``baseline_median``."""
    last = trend.rows[-1]
    if last.get("verdict") != "regression" or trend.status == "regression":
        return
    ratio = last.get("ratio")
    if not isinstance(ratio, int | float) and last.get("baseline_median"):
        ratio = float(last["median"]) / float(last["baseline_median"])
    if not isinstance(ratio, int | float) or 1 - ratio <= tolerance:
        return
    trend.status = "regression"
    trend.summary = (f"regression: the latest session ({last.get('time')}) was judged a regression at {ratio:.3g} of "
                     f"its baseline; one session makes no change point yet; the series before it: {trend.summary}")


def _slid(trend: Trend, logs: np.ndarray, tolerance: float) -> bool:
    """Whether the sessions since the baseline was recorded (all, without one) trend beyond ``tolerance`` from the
    reference: a slow drift that PELT cut into steps each too short to test. Sets the level, slope and p-value."""
    assert trend.reference is not None
    recorded = parse_time(str(trend.rows[-1].get("baseline_recorded_at") or ""))
    since = [i for i, row in enumerate(trend.rows)
             if recorded is None or (parse_time(row["time"]) or recorded) >= recorded]
    fit = _trend_slope(logs[since[0]:]) if since else None
    if fit is None:
        return False
    slope, intercept, p_value = fit
    level = float(np.exp(intercept + slope * (len(since) - 1)))
    if abs(level / trend.reference - 1.0) <= tolerance:
        return False
    trend.level_now, trend.slope_per_session, trend.drift_p_value = level, float(np.expm1(slope)), p_value
    trend.drift = level / trend.reference - 1.0
    return True


def _level_now(logs: np.ndarray) -> tuple[float, float | None]:
    """The level at the latest session of a segment (log medians), and its Theil-Sen slope per session (relative)
    when the segment trends (Mann-Kendall p < 0.01)."""
    slope = _trend_slope(logs)
    if slope is None:
        return float(np.exp(np.median(logs))), None
    return float(np.exp(slope[1] + slope[0] * (logs.size - 1))), float(np.expm1(slope[0]))


def _trend_slope(logs: np.ndarray) -> tuple[float, float, float] | None:
    """(Theil-Sen slope, intercept, Mann-Kendall p-value) of log medians against session order, when Kendall's
    tau is significant (``p < SIGNIFICANCE_ALPHA``) over at least ``MIN_TREND_SESSIONS`` sessions; else None."""
    if logs.size < MIN_TREND_SESSIONS or np.ptp(logs) == 0:
        return None
    order = np.arange(logs.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p_value = float(stats.kendalltau(order, logs).pvalue)
    if not math.isfinite(p_value) or p_value >= SIGNIFICANCE_ALPHA:
        return None
    slope, intercept, _, _ = stats.theilslopes(logs, order)
    return float(slope), float(intercept), p_value


def _reference(trend: Trend, logs: np.ndarray, start: int) -> tuple[float, str, float]:
    """(reference level, what it is, p-value that the latest segment differs from it).

    The baseline the latest session was judged against (one-sample t-test of the segment's log medians); else
    the first segment (Welch's test between the two); else, with no change point, where the series' own
    Theil-Sen line starts (the Mann-Kendall p-value, 1.0 when the series does not trend)."""
    baseline = trend.baseline
    segment = logs[start:]
    if isinstance(baseline, (int, float)) and math.isfinite(baseline) and baseline > 0:
        return float(baseline), "baseline", _one_sample_p(segment, math.log(baseline))
    if trend.changes:
        first = logs[:trend.changes[0].change.index]
        return float(np.exp(np.median(first))), "first segment", welch_p_value(first, segment)
    slope = _trend_slope(logs)
    if slope is None:
        return float(np.exp(np.median(logs))), "series median", 1.0
    return float(np.exp(slope[1])), "start of the series' trend line", slope[2]


def _one_sample_p(logs: np.ndarray, reference: float) -> float:
    """Two-sided one-sample t-test of log medians against a log reference; 1.0 with fewer than 2 sessions."""
    if logs.size < 2:
        return 1.0
    if np.ptp(logs) == 0:
        return 0.0 if logs[0] != reference else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p_value = float(stats.ttest_1samp(logs, reference).pvalue)
    return p_value if math.isfinite(p_value) else 1.0


def _accepted(trend: Trend, latest: FirstBad) -> bool:
    """Whether the baseline was re-recorded after the change (``--update-baselines=reset``)."""
    recorded = parse_time(str(trend.rows[-1].get("baseline_recorded_at") or ""))
    changed = parse_time(latest.first_bad["time"])
    return recorded is not None and changed is not None and recorded >= changed and trend.reference_source == "baseline"


def _sentence(trend: Trend, latest: FirstBad | None, sessions: int, flagged: int) -> str:
    """One line: the status, the level now against the reference, and how the change came (step or slope)."""
    assert trend.drift is not None and trend.drift_p_value is not None
    reference = " ".join(filter(None, (f"{trend.reference:.4g}", trend.unit)))
    if trend.reference_source == "series median" and trend.status == "steady":
        level = f"no change point and no trend over the last {sessions} session(s) (median {reference})"
    else:
        level = (f"level now {trend.drift:+.1%} vs the {trend.reference_source} ({reference}, "
                 f"p={trend.drift_p_value:.2g}) over the last {sessions} session(s)")
    how = []
    if latest is not None:
        change = latest.change
        how.append(f"step {change.change:+.1%} from session {latest.first_bad['time']} on (p={change.p_value:.2g}; "
                   f"changed with it: {'; '.join(latest.differences[:3])})")
    if trend.slope_per_session is not None:
        how.append(f"slope {trend.slope_per_session:+.2%} per session")
    if trend.status in ("regression", "drift"):
        how.append(f"{flagged} session(s) flagged it" if flagged else "no single session flagged it")
    if trend.status == "accepted":
        how.append("the baseline was re-recorded at the new level since")
    return f"{trend.status}: {level}" + "".join(f"; {part}" for part in how)


def analyze_all(rows: Iterable[dict[str, Any]], tolerance: float = DEFAULT_TOLERANCE,
                packages: PackageLookup | None = None, window: int | None = TREND_WINDOW) -> list[Trend]:
    """:func:`analyze` for every (hardware key, test id) in ``rows``, worst status first, then by test id."""
    trends = [analyze(group, tolerance, packages, window) for group in group_rows(rows).values()]
    return sorted(trends, key=lambda t: (STATUSES.index(t.status), t.hardware_key, t.test_id))


def load_trends(stores: HistoryStore | Sequence[HistoryStore], hardware_keys: Iterable[str] | None = None,
                test_ids: Iterable[str] | None = None,
                tolerance: float = DEFAULT_TOLERANCE,
                more_rows: Iterable[HistoryRow] = (),
                window: int | None = TREND_WINDOW) -> tuple[list[Trend], list[str]]:
    """Read the history of ``hardware_keys`` (all keys in the stores when None) from one or several folders and
    analyse the tests in ``test_ids`` (all when None), with ``more_rows`` (e.g. the fleet store's,
    :meth:`hwregress.store.fleet_store.Store.history_by_key`, or a session's own not yet written anywhere). A row
    found more than once (a copied CI cache; a session in a folder and the store) counts once, the first read (the
    folders' rows keep what the store's lack: telemetry, the package list); rows of one key from different folders
    (two runners of one hardware) join one series. Each series is analysed over its latest ``window`` sessions
    (:func:`analyze`).

    Returns:
        (trends worst first, a warning per skipped line or unreadable file: which file, which line, why).
    """
    stores = [stores] if isinstance(stores, HistoryStore) else list(stores)
    wanted = None if test_ids is None else set(test_ids)
    key_set = None if hardware_keys is None else set(hardware_keys)
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    problems: list[str] = []
    for store in stores:
        keys = store.hardware_keys() if key_set is None else key_set
        for key in sorted(set(keys)):
            try:
                for row in store.rows(key, problems):  # streamed: only the wanted rows are kept
                    if wanted is None or row["test_id"] in wanted:
                        rows.setdefault((row["session"], row["hardware_key"], row["test_id"]), row)
            except OSError as error:
                problems.append(unreadable(store.path_for(key), error))
            except ValueError as error:
                problems.append(f"{store.directory}: history of {key!r} not read ({error})")
    for row in more_rows:
        if (key_set is None or row["hardware_key"] in key_set) and (wanted is None or row["test_id"] in wanted):
            rows.setdefault((row["session"], row["hardware_key"], row["test_id"]), row)
    return analyze_all(rows.values(), tolerance, _first_known(stores), window), problems


def _first_known(stores: Sequence[HistoryStore]) -> PackageLookup:
    def lookup(digest: str) -> list[str] | None:
        return next((found for store in stores if (found := store.packages(digest)) is not None), None)

    return lookup


def has_changed(trend: Trend) -> bool:
    """Whether a test's history moved: a status in :data:`MOVED_STATUSES`, or a significant change point
    (``Welch p < 0.01``) anywhere in its series, also one the level came back from or one under the tolerance."""
    return trend.status in MOVED_STATUSES or any(item.change.significant for item in trend.changes)
