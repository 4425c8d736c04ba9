"""``--alert-webhook URL``: at the end of a session, POST its new regressions, drifts and defective hosts as one
Slack-compatible JSON message (built by :mod:`hwregress.report.alerts`; docs/alerts.md).

Registered on the controller only, never on an xdist worker, and after the collector
(:mod:`hwregress.plugin.collector`): its ``pytest_sessionfinish`` is ``trylast``, so the history is appended and
``results.json`` and the report are written before the message names them. A webhook that fails (a bad URL, a refused
connection, no answer within :data:`hwregress.plugin.webhook.TIMEOUT_S` for the whole request, a redirect, an HTTP
error status; :func:`hwregress.plugin.webhook.post_json`) is one line in the terminal summary, and never changes the
session's exit status. The URL is a secret (a Slack webhook's path is its key): it is shown only as
``scheme://host/***``, and replaced so in ``results.json``'s ``meta.args``.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from hwregress.plugin.fixture import SESSION_KEY
from hwregress.plugin.host_check import alert_findings
from hwregress.plugin.options import masked_option, value_of
from hwregress.plugin.webhook import masked, post_json, scrubbed

ENVIRONMENT_VARIABLE = "HWREGRESS_ALERT_WEBHOOK"
FLAG = "--alert-webhook"
PLUGIN_NAME = "hwregress-alerts"


def webhook_of(config: pytest.Config) -> str | None:
    """The webhook URL: ``--alert-webhook``, else the ini ``hwregress_alert_webhook``, else the environment variable
    ``HWREGRESS_ALERT_WEBHOOK``; None when none is set (or set empty)."""
    raw, _ = value_of(config, "hwregress_alert_webhook")
    url = str(raw).strip() if raw is not None else os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    return url or None


def mask_args(args: Iterable[Any]) -> list[Any]:
    """The invocation arguments with the value of ``--alert-webhook`` (either form) replaced by its masked form."""
    return masked_option(args, FLAG, masked)


class AlertHook:
    """Sends the session's alerts once, at its end, on the controller."""

    def __init__(self, config: pytest.Config, url: str) -> None:
        self.config = config
        self.url = url
        self.meta: dict[str, Any] = {}
        self.lines: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_hwregress_session_meta(self, config: pytest.Config, meta: dict[str, Any]) -> None:
        meta["args"] = mask_args(meta.get("args") or [])
        self.meta = meta  # read at the end: the CI build URL another plugin may have added

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        collector = self.config.pluginmanager.get_plugin("hwregress-collector")
        if collector is None or not collector.records:
            return
        try:
            self.lines.append(self._send(collector))
        except Exception as error:  # an alert must never fail the session: said, then left
            what = scrubbed(f"{type(error).__name__}: {error}", self.url)
            self.lines.append(f"hwregress: alert not sent to {masked(self.url)}: {what} (a defect in hwregress: "
                              "report it); the session's result is unchanged")

    def _send(self, collector: Any) -> str:
        from hwregress.report.alerts import session_alerts, slack_message

        started = _dt.datetime.fromtimestamp(collector.started, _dt.timezone.utc).isoformat(timespec="seconds")
        trends = collector.history.trends if collector.history is not None else []
        fleet = self.config.stash[SESSION_KEY].fleet if SESSION_KEY in self.config.stash else None
        defective = alert_findings(collector.host_checks, collector.session_id, started, fleet,
                                   collector.records.values())
        alerts = session_alerts(collector.records.values(), trends, collector.session_id, started, defective)
        if not alerts:
            return ""
        message = slack_message(alerts, self._location(collector.paths), socket.gethostname(), collector.session_id)
        problem = post_json(self.url, message)
        if problem is not None:
            return (f"hwregress: alert not sent to {masked(self.url)}: {problem}; the session's result is unchanged "
                    f"(check {FLAG}, ini hwregress_alert_webhook or {ENVIRONMENT_VARIABLE})")
        return f"hwregress: alert sent to {masked(self.url)}: {len(alerts)} new ({_kinds(alerts)})"

    def _location(self, paths: Mapping[str, Path]) -> Any:
        from hwregress.report.alerts import Location

        ci = self.meta.get("ci") if isinstance(self.meta.get("ci"), dict) else {}
        recorded = self.meta.get("provenance") if isinstance(self.meta.get("provenance"), dict) else {}
        build = next((str(ci[key]) for key in ("build", "build_url", "url") if ci.get(key)),
                     recorded.get("ci_build_url"))
        return Location(report=_text(paths.get("report")), results=_text(paths.get("results")), ci_build=build)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in filter(None, self.lines):
            terminalreporter.write_line(line, red="not sent" in line)


def _kinds(alerts: Iterable[Any]) -> str:
    counts: dict[str, int] = {}
    for alert in alerts:
        counts[alert.kind] = counts.get(alert.kind, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in counts.items())


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def register(config: pytest.Config) -> None:
    """Register the sender on the controller when a webhook is set (call only where the collector is registered)."""
    url = webhook_of(config)
    if url is not None:
        config.pluginmanager.register(AlertHook(config, url), PLUGIN_NAME)
