"""A new test family is one module plus its tests: a test project installs a family of its own (one module, declared
by an entry point of the group ``hwregress.families``) and one test that carries its marker, touches no hwregress
file, and gets its cases parametrized under their ids, its records judged against baselines recorded for it (its
throughput, and its latency, which it declares judged), and shown in ``results.json`` and the report, with and
without xdist."""

from __future__ import annotations

import json

import pytest
from support.project import HwProject

# the whole family: its cases (one axis of its own, "word"), its measurement (empty rounds on the session's timer), its
# baseline key, and what the judge needs to know of it (its mode's latency is judged)
ECHO_FAMILY = '''
    """A test family of this project's own: times empty rounds of a batch of echoes."""

    import statistics

    from hwregress.store.baseline_file import entry_key


    class Echo:
        name = "echo"
        marker = "echo"
        marker_help = "times empty rounds of echoes (a family of the project's own)"
        requires = frozenset()
        sub_records = ()
        view = None
        judged_latency_modes = frozenset({"echo"})

        def cases(self, selection):
            return [{"device": device, "mode": "echo", "batch_size": batch, "dtype": "fp32", "word": "hello"}
                    for device in selection.devices for batch in (2, 4)]

        def measure(self, bench, *, device, mode, batch_size, dtype, word):
            record = bench.start(self.name, device, word, mode, batch_size, dtype)
            record.unit = "samples/s"
            timer = bench.timer(device)
            seconds = [timer.time_round(lambda: None, 5) for _ in range(bench.settings.plan.rounds)]
            record.samples = [batch_size * 5 / s for s in seconds]
            record.throughput = statistics.median(record.samples)
            record.latency_ms = statistics.median(s / 5 for s in seconds) * 1000.0  # ms a step
            return bench.conclude(record, entry_key(self.name, word, mode, batch_size, dtype))


    FAMILY = Echo()
'''
ECHO_TEST = '''
    import pytest


    @pytest.mark.echo
    def test_echo(hwbench, device, mode, batch_size, dtype, word):
        record = hwbench.measure("echo", device=device, mode=mode, batch_size=batch_size, dtype=dtype, word=word)
        assert record.family == "echo"
'''
ECHO_IDS = {f"bench_tests/test_echo.py::test_echo[cpu-echo-bs{batch}-fp32-hello]" for batch in (2, 4)}


def _install_echo(project: HwProject) -> None:
    """The family's module, its test, and the entry point that installs it."""
    project.install_family("echo_family", ECHO_FAMILY, ECHO_TEST)


def test_a_family_of_ones_own_is_parametrized_judged_recorded_and_reported(hw_project):
    _install_echo(hw_project)
    recorded = hw_project.run("bench_tests/test_echo.py", "-m", "echo", "--update-baselines")
    recorded.assert_outcomes(passed=2)
    records = hw_project.results["records"]
    assert {r["test_id"] for r in records} == ECHO_IDS
    assert {(r["family"], r["model"], r["mode"], r["verdict"]) for r in records} == {("echo", "hello", "echo", "new")}
    assert all(r["latency_judged"] and not r["measures_roof"] for r in records)
    # 10 ms a step on the self-tests' clock, give or take its +-1% jitter
    assert {r["batch_size"]: r["throughput"] for r in records} == {2: pytest.approx(2 / 0.01, rel=0.02),
                                                                   4: pytest.approx(4 / 0.01, rel=0.02)}
    (baselines,) = hw_project.baseline_files()
    entries = json.loads(baselines.read_text())["entries"]
    assert sorted(entries) == ["echo/hello/echo/bs2/fp32", "echo/hello/echo/bs4/fp32"]
    assert all(entry["latency_history"] == [pytest.approx(10.0, rel=0.02)] for entry in entries.values())
    slower = hw_project.run("bench_tests/test_echo.py", "-m", "echo", "-n", "2",
                            env={"HWREGRESS_SELFTEST_SLOWDOWN": "3"})
    slower.assert_outcomes(failed=2)
    assert "test_echo[cpu-echo-bs4-fp32-hello]: throughput regressed" in slower.stdout.str()
    assert "test_echo[cpu-echo-bs4-fp32-hello]: latency p50 30." in slower.stdout.str()  # judged too, as declared
    assert {r["test_id"]: r["verdict"] for r in hw_project.results["records"]} == dict.fromkeys(ECHO_IDS, "regression")
    html = (hw_project.path / "reports" / "report.html").read_text()
    assert "test_echo[cpu-echo-bs2-fp32-hello]" in html and "test_echo[cpu-echo-bs4-fp32-hello]" in html
