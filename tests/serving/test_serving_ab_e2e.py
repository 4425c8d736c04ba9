"""The serving family's A/B form end to end through the plugin (hwregress.plugin.families.serving_ab): an A/B session
whose stack B's server is slower per token (support/serve_slowdown) serves a tiny Llama from two real
``transformers serve`` processes, judged a regression with both stacks' windows, every pair and the fingerprints'
difference in results.json; a stack B whose interpreter cannot serve fails the test naming the stack, and neither
test leaves a server behind."""

from __future__ import annotations

import os
import stat

import psutil
import pytest
from support.project import REPO, SUPPORT_DIR, HwProject
from support.schema_check import validate as validate_schema

from hwregress.serving.server import unavailable_reason

UNAVAILABLE = unavailable_reason("transformers")
pytestmark = [pytest.mark.needs_extra, pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(UNAVAILABLE is not None, reason=f"needs transformers serve: {UNAVAILABLE}")]
# 8 requests at 8/s: windows of about 1 s; one look at 8 pairs, a fresh pair of servers every 2: 4 units, enough for
# a gross drop (a ratio below 0.75 on 4 units) to decide alone
SERVING_AB = ["-m", "serving", "--devices", "cpu", "--workloads", "selftest_support", "--models", "tiny_llama",
              "--serving-rates", "8", "--serving-requests", "8", "--ab-looks", "8", "-p", "no:cacheprovider"]
SLEEP = "HWREGRESS_SELFTEST_SERVE_SLEEP_S"


@pytest.fixture
def serving_project(hw_project: HwProject) -> HwProject:
    (hw_project.path / "bench_tests" / "test_throughput.py").unlink()
    (hw_project.path / "bench_tests" / "test_serving.py").write_bytes((REPO / "bench_tests" / "test_serving.py")
                                                                      .read_bytes())
    return hw_project


def _servers_of(project: HwProject) -> list[str]:
    """The command lines of the servers (and keepers) still running of ``project``'s sessions, wherever in the
    process tree they are (an orphan is init's child): their model folders are under the project's folder."""
    left = []
    for process in psutil.process_iter():
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if "serve_entry" in command and str(project.path) in command:
            left.append(command)
    return left


@pytest.mark.nightly
def test_a_stack_whose_server_is_slower_per_token_is_a_regression_with_both_stacks_windows(serving_project):
    slowdown = os.pathsep.join([str(SUPPORT_DIR / "serve_slowdown"), os.environ.get("PYTHONPATH", "")])
    result = serving_project.run(*SERVING_AB, "--ab-env", f"{SLEEP}=0.05", "--ab-env", f"PYTHONPATH={slowdown}",
                                 fast=False)
    result.assert_outcomes(failed=1)
    results = serving_project.results
    validate_schema(results, "results")
    (record,) = results["records"]
    ab, served = record["ab"], record["serving"]
    assert record["verdict"] == "regression" and record["unit"] == "tokens/s/user", record["message"]
    assert ab["ratio"] < 0.5 and ab["verdict_unit"] == "server pair" and ab["looks_planned"] == [8]
    assert len(ab["pairs"]) == 8 == ab["pairs_kept"] and ab["units"] == 4 == ab["processes"]
    assert [pair["process"] for pair in ab["pairs"]] == [0, 0, 1, 1, 2, 2, 3, 3]  # a fresh pair of servers every 2
    assert sorted(pair["order"] for pair in ab["pairs"]) == ["AB"] * 4 + ["BA"] * 4
    assert f"env {SLEEP}: unset -> 0.05" in ab["difference"]
    assert ab["fingerprints"]["A"]["transformers"] == ab["fingerprints"]["B"]["transformers"] is not None
    assert len(served["windows"]) == 8 == len(served["reference_windows"])
    assert [pair["b"] for pair in ab["pairs"]] == pytest.approx([1000 / w["tpot"]["p50"] for w in served["windows"]])
    assert [pair["a"] for pair in ab["pairs"]] == pytest.approx(
        [1000 / w["tpot"]["p50"] for w in served["reference_windows"]])
    assert all(w["completed"] == 8 for w in served["windows"] + served["reference_windows"])
    assert "(4 units: server pairs)" in record["message"]
    assert serving_project.baseline_files() == []  # an A/B session records no baseline
    assert _servers_of(serving_project) == []


def test_a_stack_whose_interpreter_cannot_serve_fails_the_test_naming_it_and_leaves_no_server(serving_project):
    python = serving_project.path / "no-serve-python"
    python.write_text("#!/bin/sh\necho 'this interpreter has no transformers' >&2\nexit 1\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    result = serving_project.run(*SERVING_AB, f"--ab-python={python}", fast=False)
    result.assert_outcomes(failed=1)
    (record,) = serving_project.results["records"]
    assert record["verdict"] == "failed"
    assert f"stack B ({python})" in record["message"] and "this interpreter has no transformers" in record["message"]
    assert _servers_of(serving_project) == []
