"""A new judged metric is one row plus its measurement: a test project declares ``echo_p99_ms`` (lower is better, ms)
in its root ``conftest.py`` and has its own family measure it, touches no hwregress file, and gets it judged against
the baseline recorded for it (a tail that grows fails the test though its throughput holds), pooled in the baseline
entry, kept in results.json, the history, JUnit's properties and the report, with and without xdist; and, where the
fleet extra is installed, stored in the fleet store's figure rows and read back from them."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pytest
from support.project import HwProject

# the one row: appended to the project's root conftest.py, which every process of a session (xdist's workers too)
# imports before any test runs
METRIC_ROW = '''
from hwregress.store.metrics import JudgedMetric, register

register(JudgedMetric("echo_p99_ms", "lower", "ms", "echo p99"))
'''
# the measurement: a family of the project's own (as tests/plugin/test_family_e2e.py installs one) whose window times
# empty rounds on the session's timer and reports the rounds' p99 step time; ECHO_TAIL_MS adds a tail to it alone
ECHO_FAMILY = '''
    import os
    import statistics

    from hwregress.store.assembly import put_measured
    from hwregress.store.baseline_file import entry_key
    from hwregress.store.measured import MeasuredFigures


    class Echo:
        name = "echo"
        marker = "echo"
        marker_help = "times empty rounds of echoes, and their p99 (a family of the project's own)"
        requires = frozenset()
        sub_records = ()
        view = None

        def cases(self, selection):
            return [{"device": device, "mode": "echo", "batch_size": batch, "dtype": "fp32", "word": "hello"}
                    for device in selection.devices for batch in (2, 4)]

        def measure(self, bench, *, device, mode, batch_size, dtype, word):
            record = bench.start(self.name, device, word, mode, batch_size, dtype)
            timer = bench.timer(device)
            seconds = [timer.time_round(lambda: None, 5) for _ in range(bench.settings.plan.rounds)]
            step_ms = sorted(s / 5 * 1000.0 for s in seconds)
            p99 = statistics.quantiles(step_ms, n=100, method="inclusive")[98]
            samples = [batch_size * 5 / s for s in seconds]
            put_measured(record, MeasuredFigures(
                unit="samples/s", samples=samples, throughput=statistics.median(samples),
                declared={"echo_p99_ms": p99 + float(os.environ.get("ECHO_TAIL_MS", "0"))}))
            return bench.conclude(record, entry_key(self.name, word, mode, batch_size, dtype))


    FAMILY = Echo()
'''
ECHO_TEST = '''
    import pytest


    @pytest.mark.echo
    def test_echo(hwbench, device, mode, batch_size, dtype, word):
        hwbench.measure("echo", device=device, mode=mode, batch_size=batch_size, dtype=dtype, word=word)
'''
ECHO_IDS = {f"bench_tests/test_echo.py::test_echo[cpu-echo-bs{batch}-fp32-hello]" for batch in (2, 4)}
ECHO_ENTRIES = ["echo/hello/echo/bs2/fp32", "echo/hello/echo/bs4/fp32"]


def _install(project: HwProject) -> None:
    """The metric's row in the project's conftest.py, the family that measures it (installed by an entry point, a
    dist-info folder on the session's path as pip leaves one) and its test."""
    conftest = project.path / "conftest.py"
    conftest.write_text(conftest.read_text() + METRIC_ROW)
    project.install_family("echo_family", ECHO_FAMILY, ECHO_TEST)


def _declared(record: dict) -> dict:
    (figure,) = record["declared"]
    return figure


def test_a_declared_metric_is_judged_pooled_recorded_exported_and_reported(hw_project):
    _install(hw_project)
    hw_project.run("bench_tests/test_echo.py", "-m", "echo", "--update-baselines").assert_outcomes(passed=2)
    (baselines,) = hw_project.baseline_files()
    entries = json.loads(baselines.read_text())["entries"]
    assert sorted(entries) == ECHO_ENTRIES
    for entry in entries.values():  # pooled as a judged latency is: the median of the sessions' values
        (value,) = entry["metric_history"]["echo_p99_ms"]
        assert entry["metrics"] == {"echo_p99_ms": value} and value == pytest.approx(10.0, rel=0.03)

    # unchanged: judged and passed; its figure, baseline, threshold and reach in results.json, JUnit, history, report
    hw_project.run("bench_tests/test_echo.py", "-m", "echo", "--junitxml", "junit.xml").assert_outcomes(passed=2)
    records = hw_project.results["records"]
    assert {r["test_id"]: r["verdict"] for r in records} == dict.fromkeys(ECHO_IDS, "pass")
    for record in records:
        figure = _declared(record)
        assert (figure["metric"], figure["unit"], figure["direction"], figure["label"]) == (
            "echo_p99_ms", "ms", "lower", "echo p99")
        assert figure["value"] == pytest.approx(figure["baseline"], rel=0.03)
        assert figure["threshold"] >= 0.15 and figure["reach"]["figure"] == "echo_p99_ms"
    junit = ElementTree.parse(hw_project.path / "junit.xml").getroot()
    for case in junit.iter("testcase"):
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert float(properties["hwregress.declared.echo_p99_ms"]) == pytest.approx(10.0, rel=0.03)
        assert float(properties["hwregress.declared.echo_p99_ms.ratio"]) == pytest.approx(1.0, rel=0.05)
    (history,) = (hw_project.path / "reports" / "history").glob("*.jsonl")
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert len(rows) == 4 and all(row["figures"]["echo_p99_ms"] == pytest.approx(10.0, rel=0.03) for row in rows)
    html = (hw_project.path / "reports" / "report.html").read_text()
    assert 'id="declared-metrics"' in html and "echo p99" in html

    # a tail that grows fails the test by the metric alone: the throughput holds
    slower = hw_project.run("bench_tests/test_echo.py", "-m", "echo", "-n", "2", env={"ECHO_TAIL_MS": "10"})
    slower.assert_outcomes(failed=2)
    assert "test_echo[cpu-echo-bs4-fp32-hello]: echo p99 20" in slower.stdout.str()
    records = hw_project.results["records"]
    assert {r["test_id"]: r["verdict"] for r in records} == dict.fromkeys(ECHO_IDS, "regression")
    assert all(r["ratio"] == pytest.approx(1.0, rel=0.05) for r in records)
    assert all(_declared(r)["value"] / _declared(r)["baseline"] == pytest.approx(2.0, rel=0.05) for r in records)


@pytest.mark.needs_extra
def test_a_declared_metric_reaches_the_fleet_store_and_comes_back(hw_project):
    pytest.importorskip("sqlalchemy")
    from hwregress.store.database import open_store
    from hwregress.store.session_results import session_results

    _install(hw_project)
    hw_project.run("bench_tests/test_echo.py", "-m", "echo", "--update-baselines").assert_outcomes(passed=2)
    hw_project.run("bench_tests/test_echo.py", "-m", "echo").assert_outcomes(passed=2)
    store = open_store(f"sqlite:///{hw_project.path / 'reports' / 'hwregress.sqlite'}")
    try:
        session = hw_project.results["meta"]["session"]
        rows = [row for row in store.figures() if row["metric"] == "echo_p99_ms"]
        assert len(rows) == 4  # two tests, two sessions
        assert {(row["unit"], row["direction"]) for row in rows} == {("ms", "lower")}
        rebuilt = session_results(store, session)["records"]
    finally:
        store.close()
    for record in rebuilt:
        figure = _declared(record)
        assert figure["metric"] == "echo_p99_ms" and figure["value"] == pytest.approx(10.0, rel=0.03)
        assert figure["baseline"] == pytest.approx(10.0, rel=0.03) and figure["reach"]["mds"] is not None
