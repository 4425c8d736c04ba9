"""Visits (issue 39 part 2, hwregress.measure.visits and hwregress.plugin.visits): which windows get them, the fastest
judged, the record and the baseline entry they make, the worker's visit op, and end to end on the CPU: a pytest process
in a slow mode no longer makes a false regression when other processes' visits are fast, while a slowdown of every
process is still a regression."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
from support.project import SUPPORT

from hwregress import workloads
from hwregress.ab.protocol import Case, ProtocolError, decode_request
from hwregress.ab.stacks import Stack
from hwregress.ab.worker import visit_window
from hwregress.ab.workers import StackWorker, WorkerFailed
from hwregress.judge.compare import Measured, judge
from hwregress.judge.lifecycle import make_entry
from hwregress.judge.tolerances import Tolerances
from hwregress.measure import visits
from hwregress.measure.record import fastest_visit
from hwregress.measure.visits import Visit
from hwregress.store.assembly import put_measured
from hwregress.store.baseline_file import check_entry
from hwregress.store.measured import MeasuredFigures
from hwregress.store.results import TestRecord

SUPPORT_MODULES = ["selftest_support"]  # registers "tiny"; the pytester projects hold it, the worker imports it


@pytest.mark.parametrize("setting, kind, mode, batch, expected", [
    (None, "cuda", "infer", 1, visits.DEFAULT_VISITS), (None, "cuda", "decode", 1, visits.DEFAULT_VISITS),
    (None, "cuda", "prefill", 1, visits.DEFAULT_VISITS), (None, "cpu", "infer", 1, 1), (None, "cuda", "train", 1, 1),
    (None, "cuda", "infer", 8, 1), (3, "cpu", "decode", 1, 3), (3, "cuda", "train", 32, 1), (1, "cuda", "infer", 1, 1)])
def test_which_windows_get_visits(setting, kind, mode, batch, expected):
    assert visits.visits_for(setting, kind, mode, batch) == expected


def _visit(process: str, median: float, started: float = 0.0, latency: float | None = None) -> Visit:
    return Visit(process, 100 + int(started), started, [median * 0.99, median, median * 1.01], latency,
                 {"host_speed_before_ns": 40.0, "unrelated": 1})


def test_the_fastest_visit_is_judged_and_the_slow_ones_counted():
    taken = [_visit("pytest", 234.0, 0.0), _visit("visit worker 1", 280.0, 40.0), _visit("visit worker 2", 276.0, 90.0),
             _visit("visit worker 3", 238.0, 130.0)]
    assert visits.fastest(taken).process == "visit worker 1"
    figures = visits.visit_figures(taken)
    assert figures["count"] == 4 and figures["judged"] == 1 and figures["slow"] == 2 and figures["spread_s"] == 130.0
    assert figures["slowest_ratio"] == pytest.approx(234.0 / 280.0)
    assert figures["visits"][0] == {"process": "pytest", "pid": 100, "started_s": 0.0, "median": 234.0, "rounds": 3,
                                    "latency_ms": None, "host": {"host_speed_before_ns": 40.0}}
    with pytest.raises(ValueError, match="each needs samples"):
        visits.fastest([Visit("pytest", 1, 0.0, [])])


def test_the_record_takes_the_fastest_visits_judged_figures():
    record = TestRecord("t", device_name="NVIDIA H200", dtype="fp32")
    own = MeasuredFigures(samples=[234.0], throughput=234.0, latency_ms=1000 / 234.0, flops_per_sample=8e9)
    taken = [_visit("pytest", 234.0), _visit("visit worker 1", 280.0, 5.0)]
    put_measured(record, fastest_visit(record, own, taken, work_per_sample=1.0))
    assert record.samples == list(taken[1].samples) and record.throughput == pytest.approx(280.0)
    assert record.rounds == 3 and record.latency_ms == pytest.approx(1000 / 280.0)
    assert record.achieved_tflops == pytest.approx(280.0 * 8e9 / 1e12)
    assert record.details["visits"]["judged"] == 1
    decode = TestRecord("d")
    own = MeasuredFigures(samples=[100.0], throughput=100.0, latency_ms=10.0)
    put_measured(decode, fastest_visit(decode, own, [_visit("pytest", 100.0, 0, 10.0),
                                                     _visit("visit worker 1", 120.0, 1, 8.3)], 1.0))
    assert decode.latency_ms == 8.3  # a decode window's judged latency is the fastest visit's own ITL p50


def _visited_record(samples: list[float], count: int) -> TestRecord:
    record = TestRecord("t", family="throughput", model="m", mode="infer", batch_size=1, dtype="fp32",
                        samples=samples, environment={"torch": "2.11.0"}, unit="samples/s")
    record.details["visits"] = {"count": count}
    return record


def test_a_baseline_entry_keeps_its_visit_count_and_restarts_when_it_changes():
    entry = make_entry(_visited_record([280.0, 281.0, 279.0], 4))
    entry = make_entry(_visited_record([282.0, 283.0, 281.0], 4), entry)
    assert entry["visits"] == 4 and len(entry["history"]) == 2 and check_entry(entry) is None
    restarted = make_entry(_visited_record([240.0, 241.0, 239.0], 1), entry)
    assert "visits" not in restarted and restarted["history"] == [240.0]
    again = make_entry(_visited_record([280.0, 281.0, 279.0], 4), restarted)
    assert again["history"] == [280.0]
    assert check_entry({**entry, "visits": -1}) == "'visits' must be a non-negative integer, found -1"


def test_judging_across_visit_counts_says_the_figures_differ():
    entry = make_entry(_visited_record([280.0, 281.0, 279.0, 280.5, 279.5], 4))
    measured = Measured("t", [280.0, 281.0, 279.0, 280.5, 279.5], "samples/s", True, {"torch": "2.11.0"})
    notes = judge(measured, entry, Tolerances()).notes
    assert any("fastest of 4 window(s), this session's of 1: not the same figure" in note for note in notes)
    alike = Measured("t", [280.0, 281.0, 279.0, 280.5, 279.5], "samples/s", True, {"torch": "2.11.0"}, visits=4)
    assert not any("not the same figure" in note for note in judge(alike, entry, Tolerances()).notes)


@pytest.mark.parametrize("request_line, message", [
    ({"op": "visit", "case": {"model": "m", "mode": "infer", "batch_size": 1}, "rounds": 2, "min_round_s": 0.1,
      "telemetry_interval_s": 0.1}, "round count >= 3"),
    ({"op": "visit", "case": {"model": "m", "mode": "infer", "batch_size": 1}, "rounds": 3, "min_round_s": 0,
      "telemetry_interval_s": 0.1}, "min_round_s is not a number > 0"),
    ({"op": "visit", "case": {"model": "m", "batch_size": 1}, "rounds": 3, "min_round_s": 0.1,
      "telemetry_interval_s": 0.1}, r"visit request with a bad case \(case fields \['mode'\] are missing\)"),
])
def test_a_malformed_visit_request_is_named(request_line, message):
    with pytest.raises(ProtocolError, match=message):
        decode_request(json.dumps(request_line))


@pytest.fixture
def tiny_workload():
    workloads.register(workloads.Workload("visit_tiny", _tiny, input_shape=(3, 8, 8), num_classes=10), replace=True)


def _tiny():
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))


def test_a_visit_runs_the_window_the_test_runs(tiny_workload):
    answer = visit_window(Case("visit_tiny", "infer", 1, warmup_steps=1), rounds=4, min_round_s=0.005,
                          telemetry_interval_s=0.05)
    assert len(answer["samples"]) == 4 and all(sample > 0 for sample in answer["samples"])
    assert answer["latency_ms"] is None and answer["pid"] == os.getpid()
    assert set(answer["health"]) == set(visits.HOST_FACTS)


def _visit_request(case: Case) -> dict:
    return {"op": "visit", "case": case.to_dict(), "rounds": 3, "min_round_s": 0.005, "telemetry_interval_s": 0.05}


def test_a_visit_worker_is_a_process_of_its_own(monkeypatch):
    # the worker imports selftest_support (it registers "tiny") as a session's --workloads module
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT.parent), os.environ.get("PYTHONPATH", "")]))
    with StackWorker(Stack("visit 1", sys.executable, {"HWREGRESS_VISIT_WORKER": "1"}), "cpu", 300,
                     SUPPORT_MODULES) as worker:
        worker.hello()
        answer = worker.request(_visit_request(Case("tiny", "infer", 1, warmup_steps=1)))
        with pytest.raises(WorkerFailed, match="no_such_model"):
            worker.request(_visit_request(Case("no_such_model", "infer", 1)))
    assert answer["pid"] != os.getpid() and len(answer["samples"]) == 3
    assert math.isfinite(answer["started_s"])


# -- end to end on the CPU: --visits 3 --------------------------------------------------------------------------
VISITED = ["-p", "no:cacheprovider", "--devices", "cpu", "--models", "tiny", "--batch-sizes", "1", "--rounds", "5",
           "--warmup", "1", "--min-round-time", "0.02", "--profile-steps", "0", "--telemetry-interval", "0.05",
           "--workloads", "selftest_support", "--visits", "3", "-m", "throughput"]
STEP_S = "0.004"  # every forward of tiny sleeps this long: its speed is the sleep's, in every process


def _record(hw_project, mode: str = "infer") -> dict:
    (record,) = [r for r in hw_project.results["records"] if r["family"] == "throughput" and r["mode"] == mode]
    return record


CLOCK = {"HWREGRESS_SELFTEST_REAL_CLOCK": "1", "HWREGRESS_SELFTEST_SLEEP_S": STEP_S}


def _record_visited(hw_project, *args: str) -> None:
    """Record the tiny model's training (not visited: not launch-bound) and its batch-1 inference (visited) once; the
    training runs first and its gap takes the inference's worker visits (workers forked from the self-tests' zygote:
    what they decide is tested here, how a worker starts and dies in test_a_visit_worker_that_dies_...)."""
    recorded = hw_project.run(*VISITED, "--modes", "infer,train", *args, "--update-baselines",
                              env={**CLOCK, **hw_project.forked_workers()}, fast=False)
    recorded.assert_outcomes(passed=2)


@pytest.mark.slow
def test_visits_run_in_other_processes_in_the_gaps_between_tests(hw_project, xdist_args):
    _record_visited(hw_project, *xdist_args)
    assert "visits" not in _record(hw_project, "train")["details"]
    figures = _record(hw_project)["details"]["visits"]
    assert figures["count"] == 3 and len({visit["pid"] for visit in figures["visits"]}) == 3
    assert [visit["process"] for visit in figures["visits"]] == ["visit worker 1", "visit worker 2", "pytest"]
    entries = json.loads(hw_project.baseline_files()[0].read_text())["entries"]
    assert [entry.get("visits") for key, entry in sorted(entries.items()) if key.startswith("throughput/")] == [3, None]


@pytest.mark.slow
def test_a_slow_pytest_process_is_outvoted_by_its_visits_and_a_slow_machine_is_not(hw_project):
    _record_visited(hw_project)
    clock = {**CLOCK, **hw_project.forked_workers()}
    # the pytest process twice as slow, the workers not: the fastest visit is judged, a pass
    slow_here = hw_project.run(*VISITED, "--modes", "infer",
                               env={**clock, "HWREGRESS_SELFTEST_PYTEST_SLEEP_S": STEP_S}, fast=False)
    slow_here.assert_outcomes(passed=1)
    record = _record(hw_project)
    figures = record["details"]["visits"]
    by_process = {visit["process"]: visit["median"] for visit in figures["visits"]}
    judged = figures["visits"][figures["judged"]]
    # the pytest process is one of the slow and never judged; a worker may run slow too on a busy host (CI's)
    assert record["verdict"] in ("pass", "improvement") and judged["process"] != "pytest"
    assert by_process["pytest"] < (1 - visits.SLOW_SHARE) * judged["median"] and figures["slow"] >= 1

    # the same process slow with one window a session (the code before visits): a false regression
    alone = hw_project.run(*VISITED, "--modes", "infer", "--visits", "1",
                           env={**clock, "HWREGRESS_SELFTEST_PYTEST_SLEEP_S": STEP_S}, fast=False)
    alone.assert_outcomes(failed=1)

    # every process twice as slow: a regression
    slow_everywhere = hw_project.run(*VISITED, "--modes", "infer", env={**clock, "HWREGRESS_SELFTEST_SLEEP_S": "0.008"},
                                     fast=False)
    slow_everywhere.assert_outcomes(failed=1)
    assert _record(hw_project)["verdict"] == "regression"


@pytest.mark.slow
def test_a_visit_worker_that_dies_leaves_its_visits_to_the_pytest_process_and_the_test_passes(hw_project):
    result = hw_project.run(*VISITED, "--modes", "infer", "--update-baselines",
                            env={**CLOCK, "HWREGRESS_SELFTEST_VISIT_WORKER_EXIT": "1"}, fast=False)
    result.assert_outcomes(passed=1)
    processes = [visit["process"] for visit in _record(hw_project)["details"]["visits"]["visits"]]
    assert processes == ["pytest", "pytest (no visit worker)", "pytest (no visit worker)"]
