"""Alerts: what went bad first in a session, as one Slack-compatible JSON message that also carries the same fields as
plain JSON (``--alert-webhook``; docs/alerts.md). Pure: records, trends and findings in, a dict out; the sending is the
plugin's (:mod:`hwregress.plugin.alert_hook`).

An alert is raised once per test, hardware key and first bad session: a regression (the session's own verdict), a
drift (the history's status :mod:`hwregress.judge.trends` finds, which no single session flagged) or a defective host
(a finding of the fleet, given as a plain dict: :func:`defective_host_alert`). A test that stays bad over the following
sessions alerts only in the first of them: :func:`is_first_bad` decides from the states of the sessions before.

The message follows Slack's incoming webhook format (Slack API docs, "Sending messages using incoming webhooks" and
"Block Kit"): a top-level ``text`` (the notification's fallback; Slack truncates a message's text past 40,000
characters), ``blocks`` (at most 50 per message) of the types ``header`` (plain text, at most 150 characters),
``section`` and ``context`` (``mrkdwn`` text, at most 3,000 characters a section), with ``&``, ``<`` and ``>`` escaped
as ``&amp;``, ``&lt;``, ``&gt;``. The plain fields ride under the top-level key ``hwregress`` (Slack ignores a key it
does not know).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hwregress.judge.trends import Trend, analyze
from hwregress.store.results import TestRecord

ALERT_FORMAT_VERSION = 1
SLACK_TEXT_LIMIT = 40_000
SLACK_MAX_BLOCKS = 50
SLACK_SECTION_LIMIT = 3_000
SLACK_HEADER_LIMIT = 150
SLACK_CONTEXT_LIMIT = 2_000  # characters of one context element's text
BAD_VERDICTS = frozenset({"regression"})  # a session's verdicts that make it bad for a regression alert
BAD_STATUSES = frozenset({"regression", "drift"})  # history statuses that make it bad for a drift alert
BAD_HOST_STATUSES = frozenset({"defective"})
DIAGNOSIS_LINES = 3


@dataclass(frozen=True)
class Alert:
    """One alert: what went bad, on which series, against what, in which session.

    ``old`` and ``new`` are in ``unit`` (``old``: the baseline's, or the fleet's, median; ``new``: the session's);
    ``ratio`` is new over old; ``threshold`` the fraction the verdict tolerated (None where no single threshold
    applies, e.g. a drift)."""

    kind: str  # regression, drift, defective-host
    test_id: str
    hardware_key: str
    metric: str
    unit: str
    session: str
    session_time: str | None
    old: float | None
    new: float | None
    ratio: float | None
    threshold: float | None
    baseline_median: float | None = None
    baseline_recorded_at: str | None = None
    diagnosis: tuple[str, ...] = ()
    summary: str = ""
    host: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The alert's plain fields (numbers that are not finite as null)."""
        return {
            "kind": self.kind,
            "series": {"test_id": self.test_id, "hardware_key": self.hardware_key, "metric": self.metric,
                       "unit": self.unit},
            "baseline": {"median": _finite(self.baseline_median), "recorded_at": self.baseline_recorded_at},
            "contender": {"session": self.session, "time": self.session_time, "host": self.host},
            "old": _finite(self.old), "new": _finite(self.new), "ratio": _finite(self.ratio),
            "threshold": _finite(self.threshold), "diagnosis": list(self.diagnosis), "summary": self.summary,
        }


@dataclass(frozen=True)
class Location:
    """Where the session's outputs are: the report and results paths (or URLs) and the CI build that ran it."""

    report: str | None = None
    results: str | None = None
    ci_build: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"report": self.report, "results": self.results, "ci_build": self.ci_build}


def is_first_bad(previous: Sequence[str], bad: Collection[str]) -> bool:
    """Whether a session that is bad is the first bad one of its series: the latest of the earlier sessions' states
    (verdicts, history statuses or host statuses, oldest first; empty: no earlier session known) is not in ``bad``.

    Example: ``is_first_bad(["pass", "regression"], {"regression"})`` is False (it stayed regressed);
    ``is_first_bad(["regression", "pass"], {"regression"})`` is True (it came back, then fell again)."""
    return not previous or previous[-1] not in bad


def verdicts_before(rows: Iterable[Mapping[str, Any]], session: str) -> list[str]:
    """The verdicts of the history rows (one test on one hardware key, time order) before the first row of
    ``session`` (all rows when it has none); a row without a verdict counts as ``""``."""
    verdicts = []
    for row in rows:
        if row.get("session") == session:
            break
        verdicts.append(str(row.get("verdict") or ""))
    return verdicts


def status_before(trend: Trend, session: str) -> list[str]:
    """The history status of ``trend``'s series as it stood after the session before ``session``: ``[status]``, or
    ``[]`` when ``session`` is its first. That analysis reads the same window of sessions, ending one earlier: the
    row just before ``trend``'s window included."""
    earlier = []
    for row in [*trend.earlier_rows, *trend.rows]:
        if row.get("session") == session:
            break
        earlier.append(row)
    return [analyze(earlier, window=trend.window).status] if earlier else []


def regression_alert(record: TestRecord, session: str, time: str | None) -> Alert:
    """The alert of a record whose verdict is a regression: the figure that regressed (throughput first, then peak
    memory, latency, efficiency, accuracy; :func:`_regressed_figure`), the baseline it was judged against, the
    diagnosis."""
    metric, unit, old, new, ratio = _regressed_figure(record)
    return Alert(kind="regression", test_id=record.test_id, hardware_key=record.hardware_key or "", metric=metric,
                 unit=unit, session=session, session_time=time, old=old, new=new, ratio=ratio,
                 threshold=record.threshold, baseline_median=old, baseline_recorded_at=record.baseline_recorded_at,
                 diagnosis=tuple(record.diagnosis[:DIAGNOSIS_LINES]),
                 summary=record.message.replace(f"{record.test_id}: ", "")[:500])


def _regressed_figure(record: TestRecord) -> tuple[str, str, float | None, float | None, float | None]:
    """(metric, unit, baseline value, session value, ratio) of the figure a regression is about."""
    figures = [
        ("throughput", record.unit, record.baseline_throughput, record.throughput, lambda r: r < 1),
        ("peak memory", "bytes", record.baseline_peak_memory_bytes, record.peak_memory_bytes, lambda r: r > 1),
        ("latency", "ms", record.baseline_latency_ms, record.latency_ms, lambda r: r > 1),
        ("efficiency", "fraction", record.baseline_efficiency, record.efficiency, lambda r: r < 1),
        ("speedup", "x", record.baseline_speedup, record.speedup, lambda r: r < 1),
        ("accuracy", "fraction", record.baseline_accuracy, record.accuracy, lambda r: r < 1),
    ]
    for metric, unit, old, new, worse in figures:
        ratio = _ratio(new, old)
        if ratio is not None and worse(ratio):
            return metric, unit, _finite(old), _finite(new), ratio
    return "throughput", record.unit, _finite(record.baseline_throughput), _finite(record.throughput), _finite(
        record.ratio)


def drift_alert(trend: Trend, session: str) -> Alert:
    """The alert of a series whose history status is a drift: the reference it moved from (the baseline median, or the
    history's own reference level) against the session's median, and the history's sentence."""
    row = next((r for r in reversed(trend.rows) if r.get("session") == session), trend.rows[-1])
    new = _finite(row.get("median"))
    reference = _finite(trend.reference)
    differences = [line for change in trend.changes[-1:] for line in change.differences]
    return Alert(kind="drift", test_id=trend.test_id, hardware_key=trend.hardware_key, metric="throughput",
                 unit=trend.unit, session=str(row.get("session") or session), session_time=row.get("time"),
                 old=reference, new=new, ratio=_ratio(new, reference), threshold=_finite(row.get("threshold")),
                 baseline_median=_finite(row.get("baseline_median")),
                 baseline_recorded_at=row.get("baseline_recorded_at"),
                 diagnosis=tuple([*differences, *(row.get("diagnosis") or [])][:DIAGNOSIS_LINES]),
                 summary=trend.summary[:500])


DEFECTIVE_HOST_KEYS = ("host", "hardware_key", "session")


def defective_host_alert(finding: Mapping[str, Any]) -> Alert:
    """The alert of a defective-host finding, a plain dict:

    ``host`` (its stable id or alias), ``hardware_key``, ``session`` (required); ``time``, ``test_id`` (the test
    that showed it; default ``host <host>``), ``metric`` (default throughput), ``unit``, ``baseline_median`` (the
    fleet's median, in unit), ``baseline_recorded_at``, ``value`` (this host's, in unit), ``ratio`` (default value
    over baseline_median), ``threshold`` (fraction), ``evidence`` (sentences), ``previous`` (the host's earlier
    statuses, oldest first, for :func:`is_first_bad`) (optional).

    Raises:
        ValueError: a required key is missing or empty; the message names it.
    """
    missing = [key for key in DEFECTIVE_HOST_KEYS if not finding.get(key)]
    if missing:
        raise ValueError(f"defective-host finding without {', '.join(missing)}: {dict(finding)!r:.200}")
    old, new = _finite(finding.get("baseline_median")), _finite(finding.get("value"))
    ratio = _finite(finding.get("ratio"))
    return Alert(kind="defective-host", test_id=str(finding.get("test_id") or f"host {finding['host']}"),
                 hardware_key=str(finding["hardware_key"]), metric=str(finding.get("metric") or "throughput"),
                 unit=str(finding.get("unit") or ""), session=str(finding["session"]),
                 session_time=_text_or_none(finding.get("time")), old=old, new=new,
                 ratio=ratio if ratio is not None else _ratio(new, old), threshold=_finite(finding.get("threshold")),
                 baseline_median=old, baseline_recorded_at=_text_or_none(finding.get("baseline_recorded_at")),
                 diagnosis=tuple(str(line) for line in (finding.get("evidence") or []))[:DIAGNOSIS_LINES],
                 summary=str(finding.get("summary") or ""), host=str(finding["host"]))


def session_alerts(records: Iterable[TestRecord], trends: Iterable[Trend], session: str, time: str | None,
                   defective: Iterable[Mapping[str, Any]] = ()) -> list[Alert]:
    """The alerts of a session, each the first bad session of its series: its regressions whose previous session on
    the same hardware key (in ``trends``' rows) was not a regression, its drifts whose series was neither drifting
    nor regressed after the previous session, and the defective-host findings whose ``previous`` status was not
    ``defective``. Without a trend for a test (no history), every regression alerts.

    Raises:
        ValueError: a defective-host finding lacks a required key (:func:`defective_host_alert`).
    """
    by_series = {(trend.hardware_key, trend.test_id): trend for trend in trends}
    alerts = []
    for record in sorted(records, key=lambda r: r.test_id):
        if str(record.verdict) not in BAD_VERDICTS:
            continue
        trend = by_series.get((record.hardware_key or "", record.test_id))
        if is_first_bad(verdicts_before(trend.rows, session) if trend else [], BAD_VERDICTS):
            alerts.append(regression_alert(record, session, time))
    for trend in by_series.values():
        if trend.status == "drift" and is_first_bad(status_before(trend, session), BAD_STATUSES):
            alerts.append(drift_alert(trend, session))
    for finding in defective:
        alert = defective_host_alert(finding)
        if is_first_bad([str(state) for state in finding.get("previous") or []], BAD_HOST_STATUSES):
            alerts.append(alert)
    return alerts


def slack_message(alerts: Sequence[Alert], location: Location, host: str = "", session: str = "") -> dict[str, Any]:
    """The message of a session's alerts: Slack's ``text`` and ``blocks`` (see the module doc for the limits kept)
    and the plain fields under ``hwregress`` (every alert, even those the blocks had no room for)."""
    title = f"hwregress: {len(alerts)} new alert{'s' if len(alerts) != 1 else ''}" + (f" on {host}" if host else "")
    sections = [_section(_alert_mrkdwn(alert)) for alert in alerts]
    room = SLACK_MAX_BLOCKS - 2  # the header and the location
    if len(sections) > room:
        left = len(sections) - (room - 1)
        sections = [*sections[:room - 1], _section(f"and {left} more alert(s): see the report")]
    blocks = [{"type": "header", "text": {"type": "plain_text", "text": _cut(title, SLACK_HEADER_LIMIT)}},
              *sections, _location_block(location, session)]
    text = "\n".join([title, *(_alert_line(alert) for alert in alerts)])
    return {"text": _cut(text, SLACK_TEXT_LIMIT - 1), "blocks": blocks,
            "hwregress": {"version": ALERT_FORMAT_VERSION, "host": host, "session": session,
                          "location": location.to_json(), "alerts": [alert.to_json() for alert in alerts]}}


def _alert_line(alert: Alert) -> str:
    change = _change(alert)
    return f"{alert.kind}: {alert.test_id} on {alert.hardware_key}" + (f": {change}" if change else "")


def _alert_mrkdwn(alert: Alert) -> str:
    lines = [f"*{_escape(alert.kind)}* `{_escape(alert.test_id)}` on `{_escape(alert.hardware_key)}`"
             + (f" (host {_escape(alert.host)})" if alert.host else "")]
    change = _change(alert)
    if change:
        lines.append(_escape(change))
    baseline = [f"median {_number_text(alert.baseline_median)} {alert.unit}".rstrip()
                if alert.baseline_median is not None else "",
                f"recorded {alert.baseline_recorded_at}" if alert.baseline_recorded_at else ""]
    if any(baseline):
        lines.append("baseline: " + _escape(", ".join(filter(None, baseline))))
    lines.append(_escape(f"session {alert.session}" + (f" at {alert.session_time}" if alert.session_time else "")))
    if alert.summary:
        lines.append(_escape(alert.summary))
    lines += [f"• {_escape(sentence)}" for sentence in alert.diagnosis]
    return "\n".join(lines)


def _change(alert: Alert) -> str:
    if alert.old is None and alert.new is None:
        return ""
    text = f"{alert.metric} {_number_text(alert.old)} → {_number_text(alert.new)} {alert.unit}".rstrip()
    if alert.ratio is not None:
        text += f" (x{alert.ratio:.3f}"
        text += f", threshold {alert.threshold:.1%})" if _finite(alert.threshold) is not None else ")"
    return text


def _location_block(location: Location, session: str) -> dict[str, Any]:
    parts = [f"session {_escape(session)}" if session else "",
             f"report: {_escape(location.report)}" if location.report else "",
             f"results: {_escape(location.results)}" if location.results else "",
             f"CI build: <{_escape(location.ci_build)}|{_escape(location.ci_build)}>" if location.ci_build else ""]
    text = " | ".join(filter(None, parts)) or "no report written"
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(text, SLACK_CONTEXT_LIMIT)}]}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SLACK_SECTION_LIMIT)}}


def _escape(text: object) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, ending in ``…`` when cut (never empty: Slack refuses empty text)."""
    text = text or "-"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _number_text(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value) else None


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _ratio(new: Any, old: Any) -> float | None:
    new, old = _finite(new), _finite(old)
    if new is None or old is None or old == 0:
        return None
    return _finite(new / old)
