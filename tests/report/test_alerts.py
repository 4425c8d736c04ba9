"""Alerts without a pytest session: the first-bad decision, the message builder (Slack-compatible, plain fields,
within Slack's limits for any record values), and the sender against a real local HTTP server."""

from __future__ import annotations

import base64
import json
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.webhook_server import SECRET_PATH, WebhookServer, closed_port_url

from hwregress.judge.trends import MIN_SESSIONS, analyze
from hwregress.plugin.alert_hook import mask_args
from hwregress.plugin.webhook import masked, post_json, scrubbed
from hwregress.report.alerts import (
    SLACK_HEADER_LIMIT,
    SLACK_MAX_BLOCKS,
    SLACK_SECTION_LIMIT,
    SLACK_TEXT_LIMIT,
    Location,
    defective_host_alert,
    is_first_bad,
    session_alerts,
    slack_message,
    status_before,
    verdicts_before,
)
from hwregress.store.results import TestRecord
from hwregress.store.verdicts import Verdict

KNOWN_BLOCKS = {"header", "section", "context", "divider"}
ALERT_FIELDS = {"kind", "series", "baseline", "contender", "old", "new", "ratio", "threshold", "diagnosis", "summary"}


def assert_slack_compatible(message: dict) -> None:
    """Slack's incoming webhook format as hwregress uses it: a text, at most 50 blocks of known types, each text within
    its limit; JSON without NaN."""
    json.dumps(message, allow_nan=False)
    assert isinstance(message["text"], str) and 0 < len(message["text"]) < SLACK_TEXT_LIMIT
    blocks = message["blocks"]
    assert 0 < len(blocks) <= SLACK_MAX_BLOCKS
    for block in blocks:
        assert block["type"] in KNOWN_BLOCKS
        if block["type"] == "header":
            assert block["text"]["type"] == "plain_text" and 0 < len(block["text"]["text"]) <= SLACK_HEADER_LIMIT
        if block["type"] == "section":
            assert block["text"]["type"] == "mrkdwn" and 0 < len(block["text"]["text"]) <= SLACK_SECTION_LIMIT
        if block["type"] == "context":
            assert 0 < len(block["elements"]) <= 10 and all(e["type"] == "mrkdwn" and e["text"] for e in
                                                            block["elements"])


def _row(session: str, day: int, median: float, verdict: str, **extra) -> dict:
    return {"session": session, "time": f"2026-01-{day:02d}T00:00:00+00:00", "test_id": "t", "hardware_key": "k",
            "median": median, "verdict": verdict, "baseline_median": 100.0, "unit": "samples/s",
            "baseline_recorded_at": "2025-12-31T00:00:00+00:00", "threshold": 0.25, **extra}


def _regression(test_id: str = "t") -> TestRecord:
    return TestRecord(test_id=test_id, hardware_key="k", unit="samples/s", throughput=60.0, baseline_throughput=100.0,
                      ratio=0.6, threshold=0.05, verdict=Verdict.REGRESSION,
                      baseline_recorded_at="2025-12-31T00:00:00Z",
                      message=f"{test_id}: 60 samples/s is x0.600 of the baseline",
                      diagnosis=["other processes took 40% of the cores"])


def test_is_first_bad_looks_at_the_latest_earlier_state_only():
    assert is_first_bad([], {"regression"})
    assert is_first_bad(["regression", "pass"], {"regression"})
    assert not is_first_bad(["pass", "regression"], {"regression"})


def test_verdicts_before_stop_at_the_sessions_first_row():
    rows = [_row("a", 1, 100, "pass"), _row("b", 2, 60, "regression"), _row("c", 3, 60, "regression")]
    assert verdicts_before(rows, "c") == ["pass", "regression"]
    assert verdicts_before(rows, "new") == ["pass", "regression", "regression"]


def test_a_regression_alerts_in_its_first_bad_session_only():
    first = [_row("a", 1, 100, "pass"), _row("b", 2, 100, "pass"), _row("c", 3, 60, "regression")]
    (alert,) = session_alerts([_regression()], [analyze(first)], "c", "2026-01-03T00:00:00+00:00")
    assert (alert.kind, alert.test_id, alert.hardware_key, alert.metric, alert.unit) == (
        "regression", "t", "k", "throughput", "samples/s")
    assert (alert.old, alert.new, alert.ratio, alert.threshold) == (100.0, 60.0, 0.6, 0.05)
    assert alert.diagnosis == ("other processes took 40% of the cores",)
    again = [*first, _row("d", 4, 60, "regression")]
    assert session_alerts([_regression()], [analyze(again)], "d", None) == []
    assert len(session_alerts([_regression()], [], "d", None)) == 1  # no history: nothing says it was bad before


def test_a_drift_alerts_in_the_first_session_the_history_calls_it_a_drift_only():
    rows = [_row(f"s{i}", i + 1, 100 * (1 - 0.012 * i), "pass") for i in range(8)]
    statuses = [analyze(rows[:n]).status for n in range(1, 9)]
    first = statuses.index("drift")
    assert statuses[first + 1] == "drift"  # the series stays drifting after it
    (alert,) = session_alerts([], [analyze(rows[:first + 1])], f"s{first}", None)
    assert alert.kind == "drift" and alert.session == f"s{first}" and alert.summary.startswith("drift:")
    assert alert.old == 100.0 and math.isclose(alert.new, rows[first]["median"])
    assert session_alerts([], [analyze(rows[:first + 2])], f"s{first + 1}", None) == []


@pytest.mark.parametrize("window", [MIN_SESSIONS, 8, None])
def test_the_status_before_a_session_is_that_of_the_window_ending_one_session_earlier(window):
    """No baseline, a 10% step at session 3 of 30: as the window slides past the step, the status before each
    session is what the series up to the session before it gives through the same window."""
    rows = [{**_row(f"s{i:02d}", i + 1, 100.0 * (0.9 if i >= 3 else 1.0) * (1 + 0.004 * (-1) ** i), "pass"),
             "baseline_median": None, "baseline_recorded_at": None} for i in range(30)]
    for end in range(2, 31):
        before = status_before(analyze(rows[:end], window=window), rows[end - 1]["session"])
        assert before == [analyze(rows[:end - 1], window=window).status], end


def test_a_defective_host_finding_alerts_once_and_a_finding_without_a_host_is_named():
    finding = {"host": "gpu-node-7", "hardware_key": "nvidia-h100", "session": "s9", "time": "2026-01-09T00:00:00Z",
               "unit": "samples/s", "baseline_median": 1000.0, "value": 700.0, "threshold": 0.12,
               "evidence": ["30% below the fleet's median over 4 tests"]}
    (alert,) = session_alerts([], [], "s9", None, defective=[finding])
    assert (alert.kind, alert.host, alert.test_id, alert.ratio) == ("defective-host", "gpu-node-7", "host gpu-node-7",
                                                                    0.7)
    assert session_alerts([], [], "s9", None, defective=[{**finding, "previous": ["defective"]}]) == []
    with pytest.raises(ValueError, match="without host"):
        defective_host_alert({"hardware_key": "k", "session": "s"})


def test_the_message_is_slack_compatible_and_carries_the_plain_fields():
    alerts = session_alerts([_regression()], [], "s1", "2026-01-03T00:00:00+00:00",
                            defective=[{"host": "h<1>", "hardware_key": "k", "session": "s1"}])
    message = slack_message(alerts, Location("reports/report.html", "reports/results.json", "https://ci/b/7"),
                            "runner-1", "s1")
    assert_slack_compatible(message)
    plain = message["hwregress"]
    assert plain["location"] == {"report": "reports/report.html", "results": "reports/results.json",
                                 "ci_build": "https://ci/b/7"}
    assert [a["kind"] for a in plain["alerts"]] == ["regression", "defective-host"]
    regression = plain["alerts"][0]
    assert set(regression) == ALERT_FIELDS
    assert regression["series"] == {"test_id": "t", "hardware_key": "k", "metric": "throughput", "unit": "samples/s"}
    assert regression["baseline"] == {"median": 100.0, "recorded_at": "2025-12-31T00:00:00Z"}
    assert regression["contender"]["session"] == "s1" and regression["contender"]["time"].startswith("2026-01-03")
    sections = " ".join(b["text"]["text"] for b in message["blocks"] if b["type"] == "section")
    assert "x0.600" in sections and "threshold 5.0%" in sections and "h&lt;1&gt;" in sections
    assert "https://ci/b/7" in message["blocks"][-1]["elements"][0]["text"]


def test_a_session_of_many_alerts_keeps_within_fifty_blocks_and_counts_the_rest():
    alerts = session_alerts([_regression(f"t{i}") for i in range(200)], [], "s", None)
    message = slack_message(alerts, Location(), "h", "s")
    assert_slack_compatible(message)
    assert len(message["blocks"]) == SLACK_MAX_BLOCKS and len(message["hwregress"]["alerts"]) == 200
    assert message["blocks"][-2]["text"]["text"] == "and 153 more alert(s): see the report"


finite_or_not = st.floats(allow_nan=True, allow_infinity=True) | st.none()
records = st.builds(
    TestRecord, test_id=st.text(min_size=1, max_size=300), hardware_key=st.text(max_size=80),
    unit=st.text(max_size=20), throughput=finite_or_not, baseline_throughput=finite_or_not, ratio=finite_or_not,
    threshold=finite_or_not, peak_memory_bytes=st.none() | st.integers(0, 2**62),
    baseline_peak_memory_bytes=st.none() | st.integers(0, 2**62), verdict=st.just(Verdict.REGRESSION),
    message=st.text(max_size=2000), diagnosis=st.lists(st.text(max_size=3000), max_size=5),
    baseline_recorded_at=st.none() | st.text(max_size=40))


@given(st.lists(records, max_size=120), st.text(max_size=200), st.none() | st.text(max_size=500))
def test_any_record_values_make_valid_json_within_slacks_limits(values, host, build):
    alerts = session_alerts(values, [], "s", "2026-01-01T00:00:00+00:00")
    message = slack_message(alerts, Location("r.html", None, build), host, "s")
    assert_slack_compatible(message)
    assert len(message["hwregress"]["alerts"]) == len(values)  # every alert in the plain fields, room or not


def test_the_sender_posts_json_and_says_each_failure_in_words_without_the_urls_path():
    payload = {"text": "hi", "blocks": []}
    with WebhookServer(200) as server:
        assert post_json(server.url, payload) is None
    ((path, headers, body),) = server.requests
    assert path == SECRET_PATH and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == payload
    with WebhookServer(500) as server:
        failed = post_json(server.url, payload)
    assert failed == "HTTP 500 Internal Server Error (invalid_payload)"
    assert post_json(closed_port_url(), payload).startswith("no connection (")
    with WebhookServer(None) as server:
        assert post_json(server.url, payload, timeout_s=0.5) == NO_ANSWER.format(0.5)
    assert post_json("hooks.slack.com/services/x", payload) == "(a URL that is not http(s)): give http(s)://HOST/PATH"


NO_ANSWER = "the webhook did not answer within {:g} s (connecting, sending and reading its answer together)"
PAYLOAD = {"text": "hi", "blocks": []}


def test_a_webhook_that_drips_its_answer_is_given_up_at_one_deadline_for_the_whole_request():
    # a byte every 0.25 s keeps each read well within 1 s: only a deadline for the whole request ends it
    with WebhookServer(200, drip_s=0.25) as server:
        started = time.monotonic()
        problem = post_json(server.url, PAYLOAD, timeout_s=1.0)
        took = time.monotonic() - started
    assert problem == NO_ANSWER.format(1.0)
    assert took < 3 and len(server.requests) == 1


def test_a_redirect_is_not_followed_and_is_no_delivery():
    with WebhookServer(200) as elsewhere, WebhookServer(302, headers={"Location": elsewhere.url}) as server:
        problem = post_json(server.url, PAYLOAD)
        relative = WebhookServer(301, headers={"Location": "/moved" + SECRET_PATH})
        with relative:
            moved = post_json(relative.url, PAYLOAD)
    assert problem == (f"the webhook answered 302 Found (a redirect to http://127.0.0.1:{elsewhere.server.server_port}"
                       "/***): not delivered; give the URL it redirects to")
    assert len(server.requests) == 1 and elsewhere.requests == []  # never followed, not even as a GET
    assert moved.startswith(f"the webhook answered 301 Moved Permanently (a redirect to http://127.0.0.1:"
                            f"{relative.server.server_port}/***)") and SECRET_PATH not in moved


@pytest.mark.parametrize("secret", ["/services/T0/B0/secret key", "/services/T0/B0/secret\nkey",
                                    "/services/T0/B0/secret\tkey", "/services/T0/B0/secrét"],
                         ids=["space", "newline", "tab", "non-ascii"])
def test_a_url_with_a_character_http_cannot_send_is_one_line_that_never_shows_its_path(secret):
    problem = post_json(f"https://hooks.example.com{secret}", PAYLOAD)
    assert problem == ("its URL holds a space, a control or a non-ASCII character (not shown: the "
                       "path is the webhook's key); percent-encode it (a space is %20) or copy the webhook's URL again")
    url = f"https://hooks.example.com{secret}"  # what a defect's message might hold, shown scrubbed
    assert scrubbed(f"InvalidURL: {url} ({secret})", url) == "InvalidURL: https://hooks.example.com/*** (***)"


def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_shown():
    with WebhookServer(200) as server:
        url = server.url.replace("http://", "http://hw%40bot:p%3Ass@")
        assert post_json(url, PAYLOAD) is None
    ((path, headers, _),) = server.requests
    assert path == SECRET_PATH and headers["Authorization"] == f"Basic {base64.b64encode(b'hw@bot:p:ss').decode()}"
    assert masked(url) == f"http://127.0.0.1:{server.server.server_port}/***"
    assert "bot" not in scrubbed(f"failed for {url}", url) and "p%3Ass" not in scrubbed(f"p%3Ass in {url}", url)


def test_the_url_is_shown_and_recorded_masked():
    url = "https://user:pw@hooks.slack.com/services/T0/B0/key?x=1"
    assert masked(url) == "https://hooks.slack.com/***"
    assert masked("http://127.0.0.1:8080/p") == "http://127.0.0.1:8080/***"
    assert mask_args(["-n", "2", "--alert-webhook", url, f"--alert-webhook={url}"]) == [
        "-n", "2", "--alert-webhook", "https://hooks.slack.com/***", "--alert-webhook=https://hooks.slack.com/***"]
