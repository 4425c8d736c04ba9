"""``--alert-webhook URL``: at the end of a session, POST its new regressions, drifts and defective hosts as one
Slack-compatible JSON message (built by :mod:`hwregress.report.alerts`; docs/alerts.md).

Registered on the controller only, never on an xdist worker, and after the collector
(:mod:`hwregress.plugin.collector`): its ``pytest_sessionfinish`` is ``trylast``, so the history is appended and
``results.json`` and the report are written before the message names them. A webhook that fails (a bad URL, a refused
connection, no answer within ``TIMEOUT_S``, an HTTP error status) is one line in the terminal summary, and never
changes the session's exit status. The URL is a secret (a Slack webhook's path is its key): it is shown only as
``scheme://host/***``, and replaced so in ``results.json``'s ``meta.args``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from hwregress.plugin.fixture import SESSION_KEY
from hwregress.plugin.host_check import alert_findings
from hwregress.plugin.options import masked_option, value_of

ENVIRONMENT_VARIABLE = "HWREGRESS_ALERT_WEBHOOK"
FLAG = "--alert-webhook"
TIMEOUT_S = 5.0
PLUGIN_NAME = "hwregress-alerts"


def webhook_of(config: pytest.Config) -> str | None:
    """The webhook URL: ``--alert-webhook``, else the ini ``hwregress_alert_webhook``, else the environment variable
    ``HWREGRESS_ALERT_WEBHOOK``; None when none is set (or set empty)."""
    raw, _ = value_of(config, "hwregress_alert_webhook")
    url = str(raw).strip() if raw is not None else os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    return url or None


def masked(url: str) -> str:
    """``url`` with everything after its host (the path, the query, user and password) replaced by ``***``, e.g.
    ``https://hooks.slack.com/***``; ``(a URL that is not http(s))`` when it has no http(s) scheme and host."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port, parts = None, None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        return "(a URL that is not http(s))"
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}/***"


def post_json(url: str, payload: Mapping[str, Any], timeout_s: float = TIMEOUT_S) -> str | None:
    """POST ``payload`` as JSON to ``url``; None when the server answered 2xx, else what went wrong in words (never
    the URL's path). Never raises for a network or HTTP failure."""
    if masked(url).startswith("("):
        return f"{masked(url)}: give http(s)://HOST/PATH"
    body = json.dumps(payload, allow_nan=False).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json; charset=utf-8",
                                              "User-Agent": "hwregress-alerts"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read(4096)
            status = response.status
    except urllib.error.HTTPError as error:
        answer = error.read(200).decode("utf-8", "replace").strip()
        return f"HTTP {error.code} {error.reason}" + (f" ({' '.join(answer.split())})" if answer else "")
    except urllib.error.URLError as error:
        return f"no connection ({_reason(error.reason)})"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except (OSError, ValueError) as error:
        return f"failed ({_reason(error)})"
    return None if 200 <= status < 300 else f"HTTP {status}"


def _reason(reason: Any) -> str:
    if isinstance(reason, TimeoutError):
        return "timed out"
    return str(reason) or type(reason).__name__


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
            self.lines.append(f"hwregress: alert not sent to {masked(self.url)}: {type(error).__name__}: {error} "
                              "(a defect in hwregress: report it); the session's result is unchanged")

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
