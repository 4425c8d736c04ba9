"""Plain-text tables of the session history for ``python -m hwregress history``: per test its recent sessions,
change points marked with their size, significance and what changed (◆ significant, ◇ placed by PELT but not
significant, as where a slow drift is cut into steps), and the status of the latest segment."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from hwregress.judge.trends import STATUSES, FirstBad, Trend
from hwregress.store.history import parse_time

CHANGE_MARK = "◆"  # a significant change point (Welch p < 0.01)
WEAK_MARK = "◇"  # a change point PELT placed whose levels do not differ significantly
INTERRUPTED = "interrupted session"  # the note on a row of a session that did not run to its end


def trend_table(trend: Trend, since: _dt.datetime | None = None, last: int | None = None) -> list[str]:
    """The lines for one test: a heading, its status sentence, then one line per session shown.

    Args:
        trend: the analysed history of one test on one hardware key.
        since: show only sessions at or after this time (aware UTC); the analysis used every session.
        last: show at most this many of the latest sessions (None: all).
    """
    changes = {item.change.index: item for item in trend.changes}
    shown = [(index, row) for index, row in enumerate(trend.rows) if since is None or recorded_since(row, since)]
    if last is not None:
        shown = shown[-last:]
    counted = f"{len(trend.rows)} sessions" + (f", {trend.earlier_sessions} earlier not analysed (--window)"
                                               if trend.earlier_sessions else "")
    lines = [f"{trend.hardware_key}  {trend.test_id}  ({trend.unit}, {counted})", f"  {trend.summary}",
             f"  {'':2}{'session (UTC)':<26} {'median':>10} {'IQR':>9} {'n':>4}  {'verdict':<14} "
             f"{'hwregress':<10} change"]
    lines += [_session_line(row, changes.get(index)) for index, row in shown]
    hidden = len(trend.rows) - len(shown)
    if hidden:
        lines.append(f"  ({hidden} earlier session(s) not shown; the analysis used all {len(trend.rows)})")
    return lines


def recorded_since(row: dict[str, Any], since: _dt.datetime) -> bool:
    """Whether a history row's session started at or after ``since`` (aware UTC)."""
    moment = parse_time(row["time"])
    return moment is not None and moment >= since


def interrupted_note(row: dict[str, Any]) -> str:
    """``", interrupted session"`` for a history row of a session that did not run to its end (its ``interrupted``
    field), else ``""``: the note the table, the dashboard and the report's trend charts add to a session."""
    return f", {INTERRUPTED}" if row.get("interrupted") is True else ""


def _session_line(row: dict[str, Any], change: FirstBad | None) -> str:
    mark = " " if change is None else CHANGE_MARK if change.change.significant else WEAK_MARK
    iqr = row.get("iqr")
    cells = (f"  {mark} {row['time']:<26} {row['median']:>10.4g} {'-' if iqr is None else f'{iqr:.3g}':>9} "
             f"{row.get('n', '-')!s:>4}  {row.get('verdict', '-')!s:<14} {row.get('hwregress_version', '-')!s:<10}")
    note = f"  {INTERRUPTED}" if interrupted_note(row) else ""
    if change is None:
        return cells.rstrip() + note
    weak = "" if change.change.significant else ", not significant"
    return (f"{cells} {change.change.change:+.1%} (p={change.change.p_value:.2g}{weak}, {change.change.before:.4g} -> "
            f"{change.change.after:.4g}): {'; '.join(change.differences)}{note}")


def status_counts(trends: Sequence[Trend]) -> str:
    """``"12 tests: 1 regression, 2 drift, 9 steady"`` (statuses in order of concern)."""
    counts = [f"{sum(t.status == status for t in trends)} {status}" for status in STATUSES
              if any(t.status == status for t in trends)]
    return f"{len(trends)} tests: {', '.join(counts)}"
