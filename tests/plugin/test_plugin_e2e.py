"""End-to-end runs of the plugin in a pytester copy of the suite, with and without ``-n 2``."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest
from support.project import FAST as FAST_ARGS
from support.project import SUBPROCESS_ARGS

THROUGHPUT_IDS = {
    "bench_tests/test_throughput.py::test_throughput[cpu-tiny-train-bs4-fp32]",
    "bench_tests/test_throughput.py::test_throughput[cpu-tiny-infer-bs4-fp32]",
}


def test_injected_slowdown_fails_with_numbers_and_plain_rerun_passes(hw_project, xdist_args):
    for _ in range(3):  # three sessions: the threshold tightens from the cap to the measured noise
        hw_project.run("--update-baselines", *xdist_args).assert_outcomes(passed=2)
    slow = hw_project.run(*xdist_args, env={"HWREGRESS_SELFTEST_SLOWDOWN": "1.5"})
    slow.assert_outcomes(failed=2)
    output = slow.stdout.str()
    assert "test_throughput[cpu-tiny-train-bs4-fp32]: throughput regressed" in output
    # 1/1.5 = 0.667 give or take the fake clock's +-1% jitter (the rounds a confirmed window adds shift its phase)
    assert re.search(r"ratio 0\.6[67]\d < 0\.850 \(tolerance 15\.0%", output), output  # the CPU default
    verdicts = {r["test_id"]: r["verdict"] for r in hw_project.results["records"]}
    assert verdicts == dict.fromkeys(THROUGHPUT_IDS, "regression")
    hw_project.run(*xdist_args).assert_outcomes(passed=2)
    assert {r["verdict"] for r in hw_project.results["records"]} == {"pass"}
    # what each pass could have caught: the throughput's minimum detectable slowdown at the threshold it was judged
    # at, and at the level of its window's last look (alpha / K of the K planned)
    for record in hw_project.results["records"]:
        reach = record["reach"]
        assert reach["figure"] == "throughput" and reach["threshold"] == record["threshold"]
        assert reach["alpha"] == record["alpha"] == pytest.approx(0.01 / len(record["looks"]["planned"]))
        assert record["threshold"] <= reach["mds"] < 1 and reach["why_none"] is None and reach["sessions"] == 3
    html = (hw_project.path / "reports" / "report.html").read_text()
    assert "<th>catches ≥</th>" in html and "Throughput tolerance 15.0% on the CPU" in html
    largest = max(r["reach"]["mds"] for r in hw_project.results["records"])
    assert f"This session would catch a slowdown of ≥ {largest:.1%} on 2 of 2 judged tests" in html


def test_results_and_report_have_every_field(hw_project):
    hw_project.run().assert_outcomes(passed=2)
    records = hw_project.results["records"]
    assert {r["test_id"] for r in records} == THROUGHPUT_IDS
    for record in records:
        for field in ("test_id", "hardware_key", "device", "model", "mode", "batch_size", "dtype", "throughput",
                      "latency_ms", "peak_memory_bytes", "accuracy", "baseline_throughput", "ratio", "verdict",
                      "flops_per_sample", "achieved_tflops", "mfu", "energy_j_per_sample", "telemetry", "top_ops",
                      "throttled"):
            assert field in record, field
        assert record["verdict"] == "new"
        assert record["throughput"] == pytest.approx(4 / 0.01, rel=0.02)  # batch 4 / 10 ms per step
        assert record["flops_per_sample"] > 0
        # the test's wall time as pytest timed its call, what a tier's time is checked against
        # (hwregress.plugin.tier_estimate); the rounds' seconds are the project's fake timer's, not the wall's
        assert 0 < record["duration_s"] < 600
    html = (hw_project.path / "reports" / "report.html").read_text()
    assert "test_throughput[cpu-tiny-train-bs4-fp32]" in html and "--update-baselines" in html
    assert list((hw_project.path / "reports" / "archive").glob("report-*.html"))


def test_xdist_yields_the_same_results_as_serial(hw_project):
    hw_project.run().assert_outcomes(passed=2)
    serial = {r["test_id"]: r["verdict"] for r in hw_project.results["records"]}
    result = hw_project.run("-n", "2")
    result.assert_outcomes(passed=2)
    distributed = {r["test_id"]: r["verdict"] for r in hw_project.results["records"]}
    assert distributed == serial
    assert hw_project.results["meta"]["workers"] == 2
    # one device, one worker: its timing tests never run at the same time
    workers = {r["details"]["worker"] for r in hw_project.results["records"]}
    assert len(workers) == 1 and workers != {"main"}


def test_xdist_update_baselines_writes_every_entry(hw_project):
    result = hw_project.run("--update-baselines", "-n", "2", "--batch-sizes", "1,2,3,4")
    result.assert_outcomes(passed=8)
    (baseline_file,) = hw_project.baseline_files()
    entries = json.loads(baseline_file.read_text())["entries"]
    assert (sorted(entries)
            == sorted(f"throughput/tiny/{m}/bs{b}/fp32" for m in ("train", "infer") for b in (1, 2, 3, 4)))


def test_corrupt_baseline_fails_names_file_and_leaves_it_unchanged(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    (baseline_file,) = hw_project.baseline_files()
    corrupt = baseline_file.read_bytes()[:-20] + b"\x00garbage"
    baseline_file.write_bytes(corrupt)
    for args in ([], ["--update-baselines"]):
        result = hw_project.run(*args)
        result.assert_outcomes(failed=2)
        assert f"{baseline_file}: not valid JSON" in result.stdout.str()
        assert baseline_file.read_bytes() == corrupt


def test_unknown_schema_version_is_refused(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    (baseline_file,) = hw_project.baseline_files()
    data = json.loads(baseline_file.read_text())
    data["schema_version"] = 99
    baseline_file.write_text(json.dumps(data))
    result = hw_project.run()
    result.assert_outcomes(failed=2)
    assert "schema version 99 is not supported" in result.stdout.str()


def test_interrupted_session_keeps_results_of_finished_tests(hw_project):
    result = hw_project.run("--batch-sizes", "1,2,3", env={"HWREGRESS_SELFTEST_INTERRUPT": "3"})
    assert result.ret == pytest.ExitCode.INTERRUPTED
    results = hw_project.results
    assert results["meta"]["interrupted"] is True
    assert len(results["records"]) == 2
    assert {r["verdict"] for r in results["records"]} == {"new"}
    assert "interrupted" in (hw_project.path / "reports" / "report.html").read_text()
    (history,) = (hw_project.path / "reports" / "history").glob("*.jsonl")
    rows = [json.loads(line) for line in history.read_text().splitlines()]
    assert len(rows) == 2 and all(row["interrupted"] is True for row in rows)  # Ctrl-C: the session did not end


def test_process_killed_mid_session_keeps_finished_results_and_names_the_test_it_died_in(hw_project):
    dead = hw_project.run("--batch-sizes", "1,2,3", env={"HWREGRESS_SELFTEST_HARD_EXIT": "3"})
    assert dead.ret == 3
    (journal,) = (hw_project.path / "reports").glob(".results.*.partial.jsonl")
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len({line["test_id"] for line in lines if "test_id" in line}) == 2
    again = hw_project.run("--modes", "infer")
    again.assert_outcomes(passed=1)
    (recovered,) = (hw_project.path / "reports" / "archive").glob("results-*-unfinished.jsonl")
    third = "bench_tests/test_throughput.py::test_throughput[cpu-tiny-train-bs3-fp32]"
    assert f"died while running {third}; its 2 finished records are in {recovered}" in again.stdout.str()
    assert not journal.exists() and not list((hw_project.path / "reports").glob(".results.*.partial.jsonl"))
    rendered = hw_project.pytester.run(sys.executable, "-m", "hwregress", "report", "render", str(recovered),
                                       "-o", "recovered.html")
    assert rendered.ret == 0 and "2 tests" in rendered.stdout.str()
    assert "interrupted" in (hw_project.path / "recovered.html").read_text()


def test_a_session_killed_by_sigkill_has_its_finished_records_in_the_history_marked_interrupted(hw_project):
    dead = hw_project.run("--batch-sizes", "1,2,3", env={"HWREGRESS_SELFTEST_SIGKILL": "3"})
    assert dead.ret == -signal.SIGKILL  # a real SIGKILL: no hook, no finally, no atexit ran
    reports = hw_project.path / "reports"
    (journal,) = reports.glob(".results.*.partial.jsonl")
    header = json.loads(journal.read_text().splitlines()[0])
    history = reports / "history"
    assert not list(history.glob("*.jsonl"))  # the killed session never reached its end, where it appends

    again = hw_project.run("--modes", "infer")
    again.assert_outcomes(passed=1)
    (archived,) = (reports / "archive").glob("results-*-unfinished.jsonl")
    assert (f"its 2 finished records are in {archived} (render them: python -m hwregress report render {archived} -o "
            f"FILE.html); 2 rows appended to the history {history}, marked interrupted") in again.stdout.str()
    (history_file,) = history.glob("*.jsonl")
    rows = [json.loads(line) for line in history_file.read_text().splitlines()]
    finished = [f"bench_tests/test_throughput.py::test_throughput[cpu-tiny-train-bs{b}-fp32]" for b in (1, 2)]
    recovered = [row for row in rows if row["session"] == header["session"]]
    assert sorted(row["test_id"] for row in recovered) == finished
    assert all(row["interrupted"] is True and row["time"] == header["started_at"] and row["n"] >= 6
               for row in recovered)
    (own,) = [row for row in rows if row["session"] != header["session"]]
    assert "interrupted" not in own and own["test_id"].endswith("[cpu-tiny-infer-bs4-fp32]")

    table = subprocess.run([sys.executable, "-m", "hwregress", "history", "--dir", str(history), "--test", "bs1"],
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    (line,) = [line for line in table.stdout.splitlines() if header["started_at"] in line]
    assert line.rstrip().endswith("interrupted session")

    again_appended = subprocess.run([sys.executable, "-m", "hwregress", "history", "append", str(archived), "--dir",
                                     str(history)], capture_output=True, text=True, timeout=120)
    assert again_appended.returncode == 0, again_appended.stderr
    assert again_appended.stdout == (f"{archived}: session {header['session']} (started {header['started_at']}, "
                                     f"interrupted): 0 rows appended to {history}, 2 already there\n")
    assert [json.loads(line) for line in history_file.read_text().splitlines()] == rows  # nothing twice


def test_a_killed_sessions_records_go_to_its_own_history_never_to_the_next_sessions(hw_project):
    kill_at_third = {"HWREGRESS_SELFTEST_SIGKILL": "3"}
    reports = hw_project.path / "reports"
    assert hw_project.run("--batch-sizes", "1,2,3", "--no-history", env=kill_at_third).ret == -signal.SIGKILL
    (journal,) = reports.glob(".results.*.partial.jsonl")
    assert json.loads(journal.read_text().splitlines()[0])["history"] is None
    other = hw_project.path / "other-history"
    killed = hw_project.run("--batch-sizes", "1,2,3", "--history-dir", str(other), env=kill_at_third)
    assert killed.ret == -signal.SIGKILL  # it archived the --no-history session's journal, appending nothing
    (journal,) = reports.glob(".results.*.partial.jsonl")
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["history"] == str(other) and not other.exists()

    again = hw_project.run("--modes", "infer")
    again.assert_outcomes(passed=1)
    output = again.stdout.str()
    assert f"2 rows appended to the history {other}, marked interrupted" in output
    assert output.count("rows appended") == 1
    (own,) = (reports / "history").glob("*.jsonl")
    this_session = json.loads((reports / "results.json").read_text())["meta"]["session"]
    assert [json.loads(line)["session"] for line in own.read_text().splitlines()] == [this_session]
    (recovered,) = other.glob("*.jsonl")
    assert [json.loads(line)["session"] for line in recovered.read_text().splitlines()] == [header["session"]] * 2


def test_two_sessions_sharing_a_report_folder_keep_each_others_journal_and_archive(hw_project):
    first = hw_project.pytester.popen([sys.executable, "-m", "pytest", *SUBPROCESS_ARGS, *FAST_ARGS,
                                       "--batch-sizes", "1,2,3,4,5,6", "--min-round-time", "0.3"],
                                      stdin=subprocess.DEVNULL)
    reports = hw_project.path / "reports"
    _wait_for(lambda: list(reports.glob(".results.*.partial.jsonl")), first)
    second = hw_project.run("--modes", "infer")
    second.assert_outcomes(passed=1)
    assert "an earlier session" not in second.stdout.str()
    assert not (reports / "archive").exists() or not list((reports / "archive").glob("*-unfinished.jsonl"))
    assert first.wait(timeout=600) == 0
    assert not list(reports.glob(".results.*.partial.jsonl"))  # each removed its own journal only
    archived = [json.loads(path.read_text())["meta"] for path in (reports / "archive").glob("results-*.json")]
    assert len({meta["session"] for meta in archived}) == len(archived) == 2  # each session's archive copy kept


def _wait_for(condition, process, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None and time.monotonic() < deadline, "the first session ended too early"
        time.sleep(0.05)


def test_out_of_memory_skips_with_reason_and_session_continues(hw_project):
    result = hw_project.run("--batch-sizes", "2,512", env={"HWREGRESS_SELFTEST_OOM_AT": "512"})
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*out of memory at batch 512 on cpu*"])
    verdicts = sorted(r["verdict"] for r in hw_project.results["records"])
    assert verdicts == ["new", "new", "oom", "oom"]
    assert all(r["duration_s"] > 0 for r in hw_project.results["records"])  # a skipped test's time too


def test_crash_inside_a_test_fails_it_and_keeps_the_rest(hw_project):
    hw_project.run("--update-baselines", "--batch-sizes", "2,3").assert_outcomes(passed=4)
    (baseline_file,) = hw_project.baseline_files()
    before = baseline_file.read_bytes()
    result = hw_project.run("--update-baselines", "--batch-sizes", "2,3", env={"HWREGRESS_SELFTEST_CRASH_AT": "2"})
    result.assert_outcomes(passed=2, failed=2)
    verdicts = {(r["mode"], r["batch_size"]): r["verdict"] for r in hw_project.results["records"]}
    assert verdicts[("train", 2)] == verdicts[("infer", 2)] == "failed"
    assert verdicts[("train", 3)] == verdicts[("infer", 3)] == "pass"
    entries = json.loads(baseline_file.read_text())["entries"]
    assert json.loads(before)["entries"]["throughput/tiny/train/bs2/fp32"] == entries["throughput/tiny/train/bs2/fp32"]


def test_update_never_absorbs_a_regression_force_pools_it_and_reset_accepts_it(hw_project):
    for _ in range(3):
        hw_project.run("--update-baselines").assert_outcomes(passed=2)
    (baseline_file,) = hw_project.baseline_files()
    before = json.loads(baseline_file.read_text())["entries"]
    slow = {"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"}
    result = hw_project.run("--update-baselines", env=slow)
    result.assert_outcomes(failed=2)
    assert "baseline kept" in result.stdout.str()
    assert json.loads(baseline_file.read_text())["entries"] == before
    hw_project.run("--update-baselines=force", env=slow).assert_outcomes(failed=2)
    for entry in json.loads(baseline_file.read_text())["entries"].values():
        assert len(entry["session_samples"]) == 4 and len(entry["history"]) == 4
    hw_project.run(env=slow).assert_outcomes(failed=2)  # one forced session does not outvote three quiet ones
    hw_project.run("--update-baselines=reset", env=slow).assert_outcomes(failed=2)
    for key, entry in json.loads(baseline_file.read_text())["entries"].items():
        assert entry["median"] == pytest.approx(before[key]["median"] / 2, rel=0.02)
        assert entry["history"] == [entry["median"]]
    hw_project.run(env=slow).assert_outcomes(passed=2)


def test_update_missing_only_adds_new_entries(hw_project):
    hw_project.run("--update-baselines", "--modes", "train").assert_outcomes(passed=1)
    (baseline_file,) = hw_project.baseline_files()
    train_entry = json.loads(baseline_file.read_text())["entries"]["throughput/tiny/train/bs4/fp32"]
    hw_project.run("--update-baselines=missing", env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0"}).assert_outcomes(
        passed=1, failed=1)
    entries = json.loads(baseline_file.read_text())["entries"]
    assert entries["throughput/tiny/train/bs4/fp32"] == train_entry
    assert "throughput/tiny/infer/bs4/fp32" in entries


def test_require_baselines_fails_new_tests(hw_project):
    result = hw_project.run("--require-baselines")
    result.assert_outcomes(failed=2)
    assert "--require-baselines is set; record one with --update-baselines" in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--models", "resnet9000"], "unknown model 'resnet9000'; registered models: alexnet, resnet18"),
        (["--batch-sizes", "8,x"], "--batch-sizes: batch sizes must be whole numbers or 'max', got '8,x'"),
        (["--batch-sizes", "0"], "batch sizes must be >= 1, got 0"),
        (["--devices", "gpu0"], "--devices: 'gpu0' is not a device; use cpu, mps, cuda or cuda:<index>"),
        (["--dtypes", "int4"], "unknown dtype 'int4'; use fp32, tf32, bf16, fp16, int8, fp8"),
        (["--update-baselines=sometimes"], "--update-baselines='sometimes': use one of all, missing, force, reset"),
        (["--tolerance", "1.5"], "--tolerance='1.5' is out of range"),
        (["--max-threshold", "0.02"], "--max-threshold=0.02 is below the tolerance 0.15"),
        (["--baseline-dir=baselnes"], "--baseline-dir="),
        (["--devices", "cuda:7"], "--devices: cuda:7 not visible on this machine (visible: cpu"),
        (["--modes", ""], "--modes='' names nothing"),
        (["--modes", " , "], "names nothing"),
        (["--batch-sizes", "2,2,2"], "--batch-sizes='2,2,2' names 2 more than once"),
        (["--models", "resnet9000"], "--models: unknown model"),
        (["--dtypes", "int4"], "--dtypes: unknown dtype"),
        (["--compile", "tvm"], "--compile: unknown compiler 'tvm'; use eager, inductor"),
        (["--memory-format", "nhwc"], "--memory-format: unknown memory format 'nhwc'"),
        (["--modes", "fly"], "--modes: "),
        # a number that is not one, or is NaN (the messages were "is not a int" and, for NaN, "is out of range")
        (["--rounds", "nan"], "--rounds='nan' is not a whole number; use one in [3, 100000]"),
        (["--rounds", "1.5"], "--rounds='1.5' is not a whole number; use one in [3, 100000]"),
        (["--tolerance", "nan"], "--tolerance='nan' is not a number; use one in [0.0, 0.99]"),
        (["--tolerance", "NaN"], "--tolerance='NaN' is not a number; use one in [0.0, 0.99]"),
        (["--tolerance", "five"], "--tolerance='five' is not a number; use one in [0.0, 0.99]"),
        (["--min-round-time", "nan"], "--min-round-time='nan' is not a number; use one in [1e-06, 3600]"),
        (["--tolerance", "inf"], "--tolerance='inf' is out of range; use a value in [0.0, 0.99]"),
        (["--visits", "many"], "--visits='many': use auto or a whole number of visits from 1 to 64"),
    ],
)
def test_usage_errors_suggest_valid_values(hw_project, args, expected):
    result = hw_project.run(*args, fast=False, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()


def test_an_option_value_pytest_took_for_the_rootdir_is_a_usage_error_that_says_write_flag_equals_value(
        hw_project, tmp_path_factory):
    # pytest chooses the rootdir before plugins' options are known: '--baseline-dir /elsewhere' made /elsewhere the
    # rootdir, the project's ini went unread and its self-tests were collected (the VM's A/A run of 2026-11-27)
    elsewhere = tmp_path_factory.mktemp("baselines-elsewhere")
    result = hw_project.run("--baseline-dir", str(elsewhere), fast=False)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"pytest took --baseline-dir's value {elsewhere} for a test path when it chose the rootdir" in (
        result.stderr.str())
    assert f"write --baseline-dir={elsewhere}" in result.stderr.str()
    assert hw_project.run(f"--baseline-dir={elsewhere}", "--update-baselines").ret == pytest.ExitCode.OK


def test_an_option_value_inside_the_project_given_as_two_words_is_fine(hw_project):
    (hw_project.path / "other-baselines").mkdir()
    assert hw_project.run("--baseline-dir", "other-baselines", "--update-baselines").ret == pytest.ExitCode.OK


@pytest.mark.parametrize(("ini", "expected"), [
    ('hwregress_models = ["resnet9000"]', "ini option hwregress_models: unknown model 'resnet9000'"),
    ('hwregress_batch_sizes = ["4", "4"]', "ini option hwregress_batch_sizes=['4', '4'] names 4 more than once"),
])
def test_ini_errors_name_the_ini_key(hw_project, ini, expected):
    _add_ini(hw_project, ini)
    result = hw_project.run(fast=False, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()


def test_ini_accepts_toml_lists_and_space_separated_lists(hw_project):
    _add_ini(hw_project, 'hwregress_batch_sizes = ["2", "3"]\nhwregress_modes = "infer"')
    result = hw_project.run("--collect-only", "-q", "--devices", "cpu", "--models", "tiny", fast=False, inprocess=True)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_throughput?cpu-tiny-infer-bs2-fp32?",
                                 "*test_throughput?cpu-tiny-infer-bs3-fp32?"])


def _add_ini(hw_project, lines: str) -> None:
    pyproject = hw_project.path / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace("[tool.pytest.ini_options]\n", f"[tool.pytest.ini_options]\n{lines}\n"))


def test_pytest_benchmark_table_and_json_carry_the_measurements(hw_project):
    result = hw_project.run("--benchmark-json", "bench.json", "--modes", "infer")
    result.assert_outcomes(passed=1)
    data = json.loads((hw_project.path / "bench.json").read_text())
    (bench,) = data["benchmarks"]
    assert bench["extra_info"]["unit"] == "samples/s"
    assert bench["extra_info"]["throughput"] == pytest.approx(400, rel=0.02)
    assert bench["stats"]["rounds"] == 6


def test_gpu_marker_without_a_gpu_reports_skips_and_with_one_runs(hw_project):
    result = hw_project.run("-m", "gpu", "-p", "no:cacheprovider", "--models", "tiny", "--batch-sizes", "1",
                            "--modes", "infer", "--visits", "1", fast=False)
    if _cuda():  # a CUDA host runs the GPU test instead
        result.assert_outcomes(passed=1)
        assert "no CUDA device visible" not in result.stdout.str()
    else:
        result.assert_outcomes(skipped=1)
        assert "no CUDA device visible" in result.stdout.str()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_parity_tests_pass_on_cpu_and_report_shows_digits_accuracy(hw_project):
    import shutil

    from support.project import REPO

    shutil.copy(REPO / "bench_tests" / "test_parity.py", hw_project.path / "bench_tests")
    result = hw_project.run("bench_tests/test_parity.py")
    result.assert_outcomes(passed=2)
    records = {r["model"]: r for r in hw_project.results["records"]}
    assert records["digits_cnn"]["accuracy"] >= 0.9 and records["tiny"]["accuracy"] == 1.0
    html = (hw_project.path / "reports" / "report.html").read_text()
    assert "digits test accuracy" in html and f"{records['digits_cnn']['accuracy']:.4g}" in html


def test_full_disk_runs_every_test_says_what_was_lost_and_fails_the_session(hw_project):
    result = hw_project.run("--batch-sizes", "1,2", env={"HWREGRESS_SELFTEST_ENOSPC": "journal,results"})
    result.assert_outcomes(passed=4)  # every test ran and measured
    assert result.ret != pytest.ExitCode.OK
    output = result.stdout.str()
    assert "No space left on device" in output and "results not written to" in output
    assert "later records are kept in memory only" in output
    assert output.count("later records are kept in memory only") == 1  # said once, not per test
    # the kept journal and the history name the session alike, so recovering the journal later appends no row twice
    (journal,) = (hw_project.path / "reports").glob(".results.*.partial.jsonl")
    (history,) = (hw_project.path / "reports" / "history").glob("*.jsonl")
    sessions = {json.loads(line)["session"] for line in history.read_text().splitlines()}
    assert sessions == {json.loads(journal.read_text().splitlines()[0])["session"]}


def test_a_page_that_cannot_be_rendered_costs_only_the_page(hw_project):
    result = hw_project.run(env={"HWREGRESS_SELFTEST_RENDER_FAIL": "1"})
    result.assert_outcomes(passed=2)
    assert result.ret != pytest.ExitCode.OK
    reports = hw_project.path / "reports"
    assert (f"report not written to {reports}: TemplateError: injected template error; the results are in "
            f"{reports / 'results.json'}") in result.stdout.str()
    assert len(hw_project.results["records"]) == 2 and not (reports / "report.html").exists()
    (archived,) = (reports / "archive").glob("results-*.json")
    assert json.loads(archived.read_text()) == hw_project.results


def test_outputs_onto_a_fifo_or_a_device_are_refused_and_the_session_fails_keeping_its_journal(
        hw_project, character_device):
    reports = hw_project.path / "reports"
    reports.mkdir()
    os.mkfifo(reports / "results.json")
    summary = hw_project.path / "summary.md"
    summary.symlink_to(character_device)
    result = hw_project.run("--summary-md", str(summary))
    result.assert_outcomes(passed=2)  # every test ran and measured
    assert result.ret != pytest.ExitCode.OK
    output = result.stdout.str()
    assert f"results not written to {reports}: {reports / 'results.json'}: is a FIFO" in output
    assert f"Markdown summary not written to {summary}: {summary}: is a character device" in output
    assert stat.S_ISFIFO(os.lstat(reports / "results.json").st_mode) and summary.is_symlink()
    assert stat.S_ISCHR(os.stat(character_device).st_mode)
    assert list(reports.glob(".results.*.partial.jsonl"))  # the records stay in the journal


def test_regression_under_contention_names_it_in_terminal_results_and_summary(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    summary = hw_project.path / "summary.md"
    slow = hw_project.run("--summary-md", str(summary),
                          env={"HWREGRESS_SELFTEST_SLOWDOWN": "2.0", "HWREGRESS_SELFTEST_BUSY": "0.9"})
    slow.assert_outcomes(failed=2)
    for record in hw_project.results["records"]:
        assert record["verdict"] == "regression"
        assert record["diagnosis"][0].startswith("CPU contention: other processes used 90%")
    assert "likely cause: CPU contention: other processes used 90%" in slow.stdout.str()
    assert "CPU contention: other processes used 90%" in summary.read_text()


def test_baseline_of_another_hardware_identity_is_not_judged(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    (baseline_file,) = hw_project.baseline_files()
    data = json.loads(baseline_file.read_text())
    for entry in data["entries"].values():
        entry["identity"]["cpu_l3_cache_bytes"] = 1
        entry["samples"] = [s / 2 for s in entry["samples"]]  # a slower machine: would read as "improvement"
    baseline_file.write_text(json.dumps(data))
    result = hw_project.run()
    result.assert_outcomes(passed=2)
    records = hw_project.results["records"]
    assert {r["verdict"] for r in records} == {"other-hardware"}
    assert all(r["identity_changes"][0].startswith("cpu_l3_cache_bytes: 1 -> ") for r in records)
    accepted = hw_project.run("--accept-identity")
    accepted.assert_outcomes(passed=2)
    assert {r["verdict"] for r in hw_project.results["records"]} == {"improvement"}


def test_a_cpu_batch_that_cannot_fit_ends_as_oom_before_it_runs(hw_project):
    result = hw_project.run("--batch-sizes", "2,4096", "--modes", "train",
                            env={"HWREGRESS_SELFTEST_HOST_BYTES": "1"})  # any footprint is too much
    result.assert_outcomes(passed=1, skipped=1)
    (big,) = [r for r in hw_project.results["records"] if r["batch_size"] == 4096]
    assert big["verdict"] == "oom" and "out of memory at batch 4096 on cpu (predicted)" in big["message"]
    assert "injected host memory" in big["message"]


def test_a_test_of_its_own_with_a_device_parameter_is_no_hardware_test_and_writes_no_record(hw_project):
    (hw_project.path / "bench_tests" / "test_own.py").write_text(
        "import pytest\n\n\n@pytest.mark.parametrize('device', ['cpu', 'mps'])\n"
        "def test_own(device):\n    assert device in ('cpu', 'mps')\n")
    result = hw_project.run("bench_tests/test_own.py")
    result.assert_outcomes(passed=2)
    assert not (hw_project.path / "reports" / "results.json").exists()


def test_header_names_devices_hardware_key_baselines_file_and_history(hw_project):
    from hwregress.hardware.devices import describe

    key = describe("cpu").hardware_key
    before = hw_project.run("--collect-only", inprocess=True)
    before.stdout.fnmatch_lines([
        "hwregress: devices cpu",
        f"hwregress: cpu: *, hardware key {key}, baselines none: every test will be new",
        "hwregress: history reports/history (one <hardware-key>.jsonl)",
        "hwregress: live progress of scale-out jobs and Spark streams every 10 s (--hwregress-quiet silences it)",
    ])
    hw_project.run("--update-baselines", "--modes", "infer").assert_outcomes(passed=1)
    after = hw_project.run("--collect-only", "--no-history", "--hwregress-quiet", inprocess=True)
    after.stdout.fnmatch_lines([f"hwregress: cpu: *, hardware key {key}, baselines baselines/{key}.json",
                                "hwregress: history off (--no-history)",
                                "hwregress: live progress off (--hwregress-quiet)"])  # quiet keeps the header
    assert (hw_project.path / "baselines" / f"{key}.json").is_file()  # the file the session's records wrote


LIVE_WAIT = '''
from hwregress.plugin import progress


def test_a_long_wait(pytestconfig):
    clock = iter([0.0, 5.0, 10.0, 15.0, 25.0]).__next__
    lines = progress.live_lines(pytestconfig, "test_a_long_wait", clock)
    for _ in range(4):
        if lines is not None:
            lines.line(lambda: "rank 0: timed round 3 of 10")
'''


def test_live_lines_pass_pytest_capture_and_quiet_silences_them(hw_project):
    (hw_project.path / "bench_tests" / "test_wait.py").write_text(LIVE_WAIT)
    loud = hw_project.run("bench_tests/test_wait.py", "--no-hwregress-report")  # a subprocess: its capture is real
    loud.assert_outcomes(passed=1)
    lines = [line for line in loud.stdout.lines if line.startswith("hwregress: test_a_long_wait")]
    assert lines == ["hwregress: test_a_long_wait: 10 s: rank 0: timed round 3 of 10",
                     "hwregress: test_a_long_wait: 25 s: rank 0: timed round 3 of 10"]
    for quiet in (["--hwregress-quiet"], ["-o", "hwregress_quiet=true"]):
        silent = hw_project.run("bench_tests/test_wait.py", "--no-hwregress-report", *quiet, inprocess=True)
        silent.assert_outcomes(passed=1)
        assert "hwregress: test_a_long_wait" not in silent.stdout.str()
        assert "hwregress: devices cpu" in silent.stdout.str()
