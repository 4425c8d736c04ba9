"""The A/B session end to end through the plugin (``--ab-python``, ``--ab-env``): a pytester project runs the
throughput tests of a tiny model that sleeps per a stack's setting (tests/support/ab_workloads.py, ``ab_sleepy``) as
pairs of windows in two real worker processes, and results.json holds B against A."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psutil
import pytest
from support.project import SUPPORT_DIR
from support.schema_check import validate as validate_schema

# two steps a window at 20 ms a step: windows long against the tiny model's own step on a busy 2-core host
AB = ["--workloads", "ab_workloads", "--models", "ab_sleepy", "--batch-sizes", "2", "--modes", "infer",
      "--min-round-time", "0.04", "--ab-looks", "4,8", "--ab-threshold", "0.4"]
SLEEP = "HWREGRESS_AB_TEST_SLEEP_S"

pytestmark = pytest.mark.slow


def _run(hw_project, *args: str, env: dict[str, str] | None = None):
    hw_project.monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SUPPORT_DIR),
                                                                              os.environ.get("PYTHONPATH")])))
    return hw_project.run(*AB, *args, env={SLEEP: "0.02", **(env or {})})


def _records(hw_project) -> dict[str, dict]:
    return {record["test_id"].split("[")[1].rstrip("]"): record for record in hw_project.results["records"]}


def test_an_aa_session_passes_with_both_fingerprints_and_records_nothing_of_this_machine(hw_project):
    # 8 process pairs: enough to bound the ratio at alpha 0.01 (2^-8 < 0.01). Under -n 2 only (the serial A/B path is
    # the other tests' here). Both stacks' 32 workers fork from the self-tests' zygote (an interpreter of this one's,
    # without the imports' 4 s each: support/zygote.py; stack A is the session's sys.executable); the tests below of a
    # worker that dies, hangs or cannot import start them fresh, as the plugin does
    b_python = hw_project.zygote.python
    result = _run(hw_project, f"--ab-python={b_python}", "--batch-sizes", "2,4", "--ab-looks", "16", "-n", "2",
                  env=hw_project.forked_workers())
    result.assert_outcomes(passed=2)
    assert f"A/B: stack B ({b_python}) against stack A ({b_python})" in result.stdout.str()
    results = hw_project.results
    validate_schema(results, "results")
    assert results["meta"]["ab"]["stacks"]["B"] == {"python": b_python, "env": {}}
    for record in results["records"]:
        ab = record["ab"]
        assert record["verdict"] in ("pass", "unstable"), record["message"]  # never a false regression
        assert ab["ratio_low"] <= ab["ratio"] <= ab["ratio_high"] and 0.5 < ab["ratio"] < 2
        assert ab["looks_planned"] == [16] and ab["processes"] == ab["units"] == 8 and ab["pairs_per_process"] == 2
        assert [pair["process"] for pair in ab["pairs"]] == [index // 2 for index in range(16)]
        assert record["ratio"] == ab["ratio"] and record["threshold"] == pytest.approx(0.4)
        assert set(ab["fingerprints"]) == {"A", "B"} and ab["difference"] == []
        assert ab["fingerprints"]["B"]["python_executable"] == sys.executable
        assert ab["pairs_kept"] == ab["looks_taken"][-1] == len(ab["pairs"])
        orders = [pair["order"] for pair in ab["pairs"]]
        assert orders.count("AB") == orders.count("BA")
        assert all(pair["a"] > 0 and pair["b"] > 0 for pair in ab["pairs"])
        assert record["reach"]["alpha"] == ab["alpha"] and record["samples"] and record["reference_samples"]
    assert not (hw_project.path / "reports" / "history").exists()  # B against A is not this machine's figure
    assert hw_project.baseline_files() == []


def test_b_slower_by_a_setting_of_its_own_is_a_regression_naming_the_setting(hw_project):
    # B's workers fork from the self-tests' zygote (as in the A/A test above)
    result = _run(hw_project, f"--ab-python={hw_project.zygote.python}", "--ab-env", f"{SLEEP}=0.06")
    result.assert_outcomes(failed=1)
    (record,) = hw_project.results["records"]
    assert record["verdict"] == "regression"
    assert record["ab"]["ratio"] < 0.6 and record["ab"]["difference"] == [f"env {SLEEP}: 0.02 -> 0.06"]
    assert record["ab"]["fingerprints"]["B"]["env"][SLEEP] == "0.06"
    assert "B/A 0." in record["message"] and "B slower beyond -40%" in record["message"]
    assert "B slower beyond -40%" in result.stdout.str()


def _processes_with(tag: str) -> list[int]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("HWREGRESS_AB_TEST_TAG") == tag:
                found.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.nightly
def test_a_worker_dying_mid_window_fails_its_test_and_the_next_test_runs_on_a_fresh_pair(hw_project):
    tag = uuid.uuid4().hex
    # B's worker exits at its 6th forward call with a batch of 2: past the warmup (1) and the calibration (2), in a
    # window of the first test; the test of batch 4 then runs on a fresh pair
    result = _run(hw_project, "--batch-sizes", "2,4", "--ab-env", "HWREGRESS_AB_TEST_EXIT_CALL=6",
                  "--ab-env", "HWREGRESS_AB_TEST_EXIT_BATCH=2", "--ab-env", f"HWREGRESS_AB_TEST_TAG={tag}")
    result.assert_outcomes(failed=1, passed=1)
    records = _records(hw_project)
    died = records["cpu-ab_sleepy-infer-bs2-fp32"]
    assert died["verdict"] == "failed" and died["ab"] is None
    assert "worker B" in died["message"] and "exiting at forward call 6" in died["message"]
    assert "starts fresh workers" in died["message"]
    judged = records["cpu-ab_sleepy-infer-bs4-fp32"]
    assert judged["verdict"] in ("pass", "unstable") and judged["ab"]["pairs_kept"] == 8  # judged, on fresh workers
    assert _processes_with(tag) == []  # no worker outlives the session


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """An interpreter of a new virtual environment without pip: neither hwregress nor torch installed."""
    folder = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True, timeout=300)
    return str(folder / "venv" / "bin" / "python")


def test_a_b_that_cannot_import_torch_fails_every_test_naming_the_interpreter_and_the_fix(hw_project, bare_python):
    result = _run(hw_project, f"--ab-python={bare_python}", "--batch-sizes", "2,4")
    result.assert_outcomes(failed=2)
    first, second = (_records(hw_project)[f"cpu-ab_sleepy-infer-bs{size}-fp32"] for size in (2, 4))
    for record in (first, second):
        assert bare_python in record["message"] and "cannot import torch" in record["message"]
        assert "pip install" in record["message"]
    assert "found at this session's A/B test bench_tests/test_throughput.py::test_throughput[cpu-ab_sleepy-infer-" \
           "bs2-fp32] on cpu" in second["message"]
    assert _failures_section(result).count("cannot import torch") == 2  # once a test


def _failures_section(result) -> str:
    """The terminal's FAILURES section (before hwregress's own summary, which lists each failure once more)."""
    text = result.stdout.str()
    return text[text.index("= FAILURES =") : text.index("= hwregress =")]


@pytest.mark.nightly
def test_a_b_that_hangs_at_start_fails_the_devices_later_tests_at_once_naming_the_first_failure(hw_project,
                                                                                                  tmp_path):
    hanging = tmp_path / "python"  # an "interpreter" that never answers hello
    hanging.write_text("#!/bin/sh\nexec sleep 600\n")
    hanging.chmod(0o755)
    # 10 s: stack A's worker, asked first, imports torch within it even on a busy 2-core machine
    result = _run(hw_project, f"--ab-python={hanging}", "--batch-sizes", "2,4", "--ab-timeout", "10")
    result.assert_outcomes(failed=2)
    first, second = (_records(hw_project)[f"cpu-ab_sleepy-infer-bs{size}-fp32"] for size in (2, 4))
    hung = f"worker B ({hanging}) did not answer hello within 10 s; it was killed"
    assert first["message"].startswith(hung) and "later A/B tests fail at once" in first["message"]
    assert second["message"].startswith(hung), second["message"]
    assert "found at this session's A/B test bench_tests/test_throughput.py::test_throughput[cpu-ab_sleepy-infer-" \
           "bs2-fp32] on cpu" in second["message"]
    assert second["duration_s"] < 2, second["duration_s"]  # not another wait of --ab-timeout
    assert _failures_section(result).count(hung) == 2  # once a test: not again as the failure's context


@pytest.mark.parametrize(("args", "said"), [
    (["--ab-env", "OMP_NUM_THREADS=1", "--update-baselines"], "records no baseline"),
    (["--ab-env", "OMP_NUM_THREADS"], "--ab-env 'OMP_NUM_THREADS' has no '='"),
    (["--ab-python=/no/such/python"], "--ab-python '/no/such/python'"),
    (["--ab-env", "A=1", "--ab-looks", "3,6"], "--ab-looks='3,6'"),
    (["--ab-env", "A=1", "--ab-looks", "10,x"], "give whole pair counts"),
    ([f"--ab-python-a={sys.executable}"], "--ab-python-a without --ab-python or --ab-env"),
    (["--ab-env", "A=1", "--ab-python-a=/no/such/python"], "--ab-python-a '/no/such/python'"),
], ids=["update-baselines", "env-without-equals", "no-interpreter", "odd-look", "not-a-number", "a-without-b",
        "no-interpreter-a"])
def test_bad_ab_options_are_usage_errors_naming_the_value(hw_project, args, said):
    result = hw_project.run(*args, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in str(result.stderr) + str(result.stdout)
