"""``--alert-webhook`` end to end: pytester sessions of the suite post to a real local HTTP server; a regression alerts
once, in its first bad session, on the controller (with and without ``-n 2``); a failing webhook is one line and leaves
the session's exit status as it was."""

from __future__ import annotations

import pytest
from support.store_results import push_as_other_hosts
from support.webhook_server import SECRET_PATH, WebhookServer, closed_port_url
from test_alerts import ALERT_FIELDS, assert_slack_compatible

from hwregress.store.database import open_store

SLOW = {"HWREGRESS_SELFTEST_SLOWDOWN": "1.5"}
TESTS = {"bench_tests/test_throughput.py::test_throughput[cpu-tiny-train-bs4-fp32]",
         "bench_tests/test_throughput.py::test_throughput[cpu-tiny-infer-bs4-fp32]"}
# a project that alerts and does not gate: a failed call passes once hwregress has recorded its verdict, so a session
# that alerts exits 0, and a webhook that changed the exit status would show
FORGIVING_CONFTEST = '''
import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        report.outcome, report.longrepr = "passed", None
    return report
'''


def _alert_lines(result) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith("hwregress: alert")]


@pytest.mark.slow
def test_a_regression_alerts_once_in_its_first_bad_session_and_a_pass_sends_nothing(hw_project, xdist_args):
    hw_project.run("--update-baselines", *xdist_args).assert_outcomes(passed=2)
    with WebhookServer(200) as server:
        hook = f"--alert-webhook={server.url}"
        passed = hw_project.run(hook, *xdist_args)
        passed.assert_outcomes(passed=2)
        assert server.requests == [] and _alert_lines(passed) == []
        slow = hw_project.run(hook, *xdist_args, env=SLOW)
        slow.assert_outcomes(failed=2)
        assert len(server.requests) == 1  # one message, from the controller, whatever the workers
        again = hw_project.run(*xdist_args, env={**SLOW, "HWREGRESS_ALERT_WEBHOOK": server.url})  # env form
        again.assert_outcomes(failed=2)
    assert len(server.requests) == 1 and _alert_lines(again) == []  # still regressed: no second alert
    (message,) = server.messages()
    assert_slack_compatible(message)
    alerts = message["hwregress"]["alerts"]
    assert {a["series"]["test_id"] for a in alerts} == TESTS and all(a["kind"] == "regression" for a in alerts)
    results = hw_project.results  # the first slow session's results were replaced by the third's: check fields only
    for alert in alerts:
        assert set(alert) == ALERT_FIELDS and alert["series"]["metric"] == "throughput"
        assert alert["series"]["hardware_key"] == results["records"][0]["hardware_key"]
        assert alert["new"] < alert["old"] and 0 < alert["ratio"] < 1 and alert["threshold"] > 0
        assert alert["baseline"]["median"] == alert["old"] and alert["baseline"]["recorded_at"]
        assert alert["contender"]["session"] == message["hwregress"]["session"] and alert["contender"]["time"]
    location = message["hwregress"]["location"]
    assert location["report"] == str(hw_project.path / "reports" / "report.html")
    assert location["results"] == str(hw_project.path / "reports" / "results.json")
    (line,) = _alert_lines(slow)
    assert line == f"hwregress: alert sent to http://127.0.0.1:{server.server.server_port}/***: 2 new (2 regression)"
    assert SECRET_PATH not in slow.stdout.str()
    archived = [path.read_text() for path in (hw_project.path / "reports" / "archive").glob("results-*.json")]
    assert len(archived) == 4 and not any(SECRET_PATH in text for text in archived)
    assert sum(f'"--alert-webhook=http://127.0.0.1:{server.server.server_port}/***"' in text for text in archived) == 2


@pytest.mark.slow
def test_a_failing_webhook_is_one_line_and_leaves_the_exit_status_as_it_was(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    with (hw_project.path / "conftest.py").open("a") as conftest:
        conftest.write(FORGIVING_CONFTEST)
    args = ("--no-history", "--store=none", "--alert-webhook")  # without a history every regression is a first one
    with WebhookServer(500) as server:
        refused = hw_project.run(*args, server.url, env=SLOW)
    with WebhookServer(None) as hanging:
        silent = hw_project.run(*args, hanging.url, env=SLOW)
    with WebhookServer(200, drip_s=1.0) as dripping:  # each read within the limit: only the whole request's ends it
        dripped = hw_project.run(*args, dripping.url, env=SLOW)
    closed = hw_project.run(*args, closed_port_url(), env=SLOW)
    bad = hw_project.run(*args, "hooks.example.com/services/T0/B0/key", env=SLOW)
    no_answer = "the webhook did not answer within 5 s (connecting, sending and reading its answer together)"
    expected = {refused: "HTTP 500 Internal Server Error (invalid_payload)", silent: no_answer, dripped: no_answer,
                closed: "no connection (", bad: "(a URL that is not http(s)): give http(s)://HOST/PATH"}
    for result, problem in expected.items():
        result.assert_outcomes(passed=2)
        assert {r["verdict"] for r in hw_project.results["records"]} == {"regression"}
        assert result.ret == 0
        (line,) = _alert_lines(result)
        assert line.startswith("hwregress: alert not sent to ") and problem in line, line
        assert "the session's result is unchanged" in line and SECRET_PATH not in result.stdout.str()
        assert "/B0/key" not in result.stdout.str()
    assert len(server.requests) == 1 and len(hanging.requests) == 1 and len(dripping.requests) == 1


# a second model (the tiny one under another name): a host is defective when two models fall below their fleet
SECOND_MODEL_CONFTEST = '''
import selftest_support

from hwregress import workloads

workloads.register(workloads.Workload("tiny2", selftest_support._MaybeOom, input_shape=(3, 8, 8), num_classes=10),
                   replace=True)
'''
TWO_MODELS = ("--models", "tiny,tiny2", "--baseline-dir=no-baselines", "--no-history")


def _defective_alerts(server: WebhookServer) -> list[dict]:
    return [alert for message in server.messages() for alert in message["hwregress"]["alerts"]
            if alert["kind"] == "defective-host"]


def _fleet_of_four(hw_project) -> str:
    """A SQLite store of four other hosts, each a copy of a real session of this machine (0.98-1.03 x its figures);
    its URL."""
    (hw_project.path / "no-baselines").mkdir()
    hw_project.run(*TWO_MODELS, "--store=none").assert_outcomes(passed=4)
    real = hw_project.results
    url = f"sqlite:///{hw_project.path / 'fleet.sqlite'}"
    store = open_store(url)
    push_as_other_hosts(store, real)
    store.close()
    return url


@pytest.mark.slow
def test_a_defective_host_alerts_in_its_first_defective_session_only(hw_project):
    """This machine against a fleet of four in a real SQLite store: a healthy session (checked, pushed), then two
    sessions twice as slow (both models below the fleet: defective): the first alerts, the second does not, as the
    store holds the first's defective check of this host and key."""
    with (hw_project.path / "conftest.py").open("a") as conftest:
        conftest.write(SECOND_MODEL_CONFTEST)
    store = f"--store={_fleet_of_four(hw_project)}"
    hw_project.run(*TWO_MODELS, store).assert_outcomes(passed=4)
    assert [c["defective"] for c in hw_project.results["meta"]["host_check"]] == [False]
    with WebhookServer(200) as server:
        hook = f"--alert-webhook={server.url}"
        hw_project.run(*TWO_MODELS, store, hook, env={"HWREGRESS_SELFTEST_SLOWDOWN": "2"})
        (first,) = hw_project.results["meta"]["host_check"]
        assert first["defective"] and first["models"] == ["tiny", "tiny2"]
        (alert,) = _defective_alerts(server)  # after a healthy session: its first defective session
        assert alert["contender"]["host"] == first["host"] and alert["series"]["hardware_key"] == first["hardware_key"]
        again = hw_project.run(*TWO_MODELS, store, hook, env={"HWREGRESS_SELFTEST_SLOWDOWN": "2"})
        assert [c["defective"] for c in hw_project.results["meta"]["host_check"]] == [True]
    # nothing new in the second: the store holds the first's regressions (its trends) and its defective check
    assert len(server.requests) == 1 and not _alert_lines(again), _alert_lines(again)
    assert len(_defective_alerts(server)) == 1
