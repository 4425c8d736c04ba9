"""A bisection over interpreters (hwregress.bisect.stacks, python -m hwregress bisect): each probe's A/B session
command, its results.json read back into the probe's verdict (any regression, else any undecided, else pass), a
session that judged nothing skipping the candidate with why, the command line's usage errors, and its summary and
JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hwregress.bisect.ladders import stacks_ladder
from hwregress.bisect.search import CULPRIT, CandidateSkipped, ProbeOutcome, bisect
from hwregress.bisect.stacks import ProbeSettings, StackProbes, ab_command, outcome_of
from hwregress.cli import main
from hwregress.cli.bisect import bisection_json, sigterm_as_interrupt, summary


def _record(test: str, verdict: str, ratio: float | None, pairs: int = 20) -> dict:
    return {"test_id": test, "verdict": verdict, "message": f"{verdict} message",
            "ab": {"ratio": ratio, "ratio_low": None if ratio is None else ratio - 0.02,
                   "ratio_high": None if ratio is None else ratio + 0.02, "pairs": [{}] * pairs}}


def test_a_probe_is_the_references_ab_session_with_the_candidate_as_stack_b(tmp_path):
    settings = ProbeSettings(("-m", "cpu", "-k", "resnet18"), 0.05, (20, 40, 80), tmp_path)
    command = ab_command("/venvs/good/bin/python", "/venvs/mid/bin/python", settings, tmp_path / "probe-01", seed=3)
    assert command[:3] == ["/venvs/good/bin/python", "-m", "pytest"]  # the session is the reference's
    assert command[3:7] == ["-m", "cpu", "-k", "resnet18"]
    assert "--ab-python-a=/venvs/good/bin/python" in command and "--ab-python=/venvs/mid/bin/python" in command
    assert "--ab-threshold=0.05" in command
    assert "--ab-looks=20,40,80" in command and "--ab-seed=3" in command
    assert f"--report-dir={tmp_path / 'probe-01'}" in command


@pytest.mark.parametrize(("verdicts", "expected"), [
    (["pass", "regression", "unstable"], "regression"), (["pass", "unstable"], "unstable"),
    (["improvement", "pass"], "pass"), (["improvement", "improvement"], "improvement"), (["pass"], "pass")])
def test_a_probes_verdict_is_its_worst_test(verdicts, expected, tmp_path):
    ratios = {"regression": 0.8, "unstable": 0.97, "pass": 1.0, "improvement": 1.2}
    results = {"records": [_record(f"t{i}", v, ratios[v]) for i, v in enumerate(verdicts)]}
    outcome = outcome_of(results, 12.0, tmp_path)
    assert outcome.verdict == expected and outcome.seconds == 12.0
    assert outcome.ratio == min(ratios[v] for v in verdicts)  # the slowest test's ratio, with its bounds
    assert outcome.ratio_low == pytest.approx(outcome.ratio - 0.02) and outcome.pairs == 20 * len(verdicts)
    assert set(outcome.details["tests"]) == {f"t{i}" for i in range(len(verdicts))}


def test_a_session_that_judged_no_test_skips_the_candidate_naming_why(tmp_path):
    results = {"records": [{"test_id": "t0", "verdict": "failed", "message": "stack B cannot import torch"}]}
    with pytest.raises(CandidateSkipped, match=r"judged no test: 1 failed \(first: t0: stack B cannot import torch"):
        outcome_of(results, 1.0, tmp_path)
    results["records"] += [{"test_id": f"s{i}", "verdict": "unsupported", "message": "no GPU"} for i in range(3)]
    with pytest.raises(CandidateSkipped, match=r"judged no test: 1 failed \(first: t0: .*\), 3 unsupported$"):
        outcome_of(results, 1.0, tmp_path)
    with pytest.raises(CandidateSkipped, match="no test ran"):
        outcome_of({"records": []}, 1.0, tmp_path)


def test_an_interpreter_that_cannot_run_the_session_is_skipped_with_its_output(tmp_path):
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'no pytest here' >&2\nexit 3\n")
    broken.chmod(0o755)
    stacks = [str(broken), sys.executable]
    selection = ("bench_tests/test_throughput.py", "-m", "cpu", "--models", "resnet18", "--modes", "infer",
                 "--batch-sizes", "8")
    probes = StackProbes(stacks.__getitem__, ProbeSettings(selection, 0.05, (20,), tmp_path / "work"))
    with pytest.raises(CandidateSkipped, match=r"(?s)wrote no results.json \(exit 3\).*no pytest here"):
        probes(1, 0)  # the reference runs the session
    with pytest.raises(CandidateSkipped, match=r"(?s)judged no test: 1 failed \(first: .*resnet18.*no pytest here"):
        probes(0, 1)  # the candidate's workers cannot start


def test_the_summary_and_json_name_the_culprit_the_last_good_and_every_probe(tmp_path):
    stacks = ["py-a", "py-b", "py-c", "py-d"]

    def run(candidate: int, reference: int) -> ProbeOutcome:
        return ProbeOutcome("regression" if candidate >= 2 else "pass", 0.9 if candidate >= 2 else 1.0, pairs=40,
                            seconds=30.0)

    found = bisect(4, run)
    assert found.status == CULPRIT
    document = bisection_json(found, stacks_ladder(stacks), ProbeSettings(("-m", "cpu"), 0.05, (20, 40), tmp_path))
    assert summary(document)[0] == "culprit: py-c (the first bad; the last good: py-b)"
    assert summary(document)[-1] == f"{len(found.probes)} probes, {30 * len(found.probes)} s"
    assert document["culprit"] == "py-c" and document["exit_code"] == 0 and document["last_good"] == "py-b"
    assert document["kind"] == "stacks" and document["candidates"] == stacks == document["labels"]
    assert document["probes"][0] == {"candidate": "py-d", "reference": "py-a", "side": "bad", "skipped": None,
                                     "verdict": "regression", "ratio": 0.9, "ratio_low": None, "ratio_high": None,
                                     "pairs": 40, "seconds": 30.0, "details": {}}
    json.dumps(document)


@pytest.mark.parametrize(("stacks", "fault"), [
    ("{python}", "names 1 interpreter"), ("{python},/no/such/python", "'/no/such/python' is not an executable"),
    ("{python},{python}", "named twice")])
def test_stacks_that_cannot_be_bisected_are_a_usage_error(stacks, fault, capsys, tmp_path):
    other = tmp_path / "other-python"
    other.symlink_to(sys.executable)
    assert main(["bisect", "--stacks", stacks.format(python=sys.executable)]) == 2
    assert fault in capsys.readouterr().err


def test_looks_that_are_not_increasing_even_pair_counts_are_a_usage_error(capsys, tmp_path):
    other = tmp_path / "other-python"
    other.symlink_to(sys.executable)
    assert main(["bisect", "--stacks", f"{sys.executable},{other}", "--looks", "20,15"]) == 2
    assert "--looks: '20,15'" in capsys.readouterr().err


def test_the_command_is_reachable_as_python_m_hwregress_bisect():
    done = subprocess.run([sys.executable, "-m", "hwregress", "bisect", "--help"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and "--stacks" in done.stdout and "exit status" in done.stdout.lower()
    assert Path(sys.executable).exists()


def test_sigterm_is_a_ctrl_c_while_a_bisection_runs_and_only_then():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once
    assert signal.getsignal(signal.SIGTERM) == previous
