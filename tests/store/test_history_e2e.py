"""The session history end to end: sessions of the pytester suite append to it, an injected step (a slowdown that
came with a torch "upgrade") is found by the history command and shown in the report with what changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support.schema_check import validate as validate_schema

SLOW = {"HWREGRESS_SELFTEST_SLOWDOWN": "1.5", "HWREGRESS_SELFTEST_TORCH": "9.9.9"}
TRAIN = "test_throughput[cpu-tiny-train-bs4-fp32]"


def _history_rows(project) -> list[dict]:
    (path,) = (project.path / "reports" / "history").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _history_command(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwregress", "history", "--dir",
                           str(project.path / "reports" / "history"),
                           *args], capture_output=True, text=True, timeout=120)


def test_injected_step_is_a_change_point_the_history_command_gates_on_and_the_report_shows(hw_project):
    xdist = ["-n", "2"]  # the controller appends for both workers: nothing may be lost
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    hw_project.run().assert_outcomes(passed=2)
    hw_project.run(*xdist).assert_outcomes(passed=2)
    for args in ([], xdist, []):
        slow = hw_project.run(*args, env=SLOW)
        slow.assert_outcomes(failed=2)

    rows = _history_rows(hw_project)
    assert len(rows) == 12 and len({r["session"] for r in rows}) == 6  # 6 sessions x 2 tests, none lost
    assert all(r["test_id"].count("tiny") == 1 and r["n"] >= 6 for r in rows)

    gate = _history_command(hw_project, "--fail-on", "regression")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    train_table = gate.stdout.split(TRAIN, 1)[1].split("\n\n", 1)[0]
    marked = [line for line in train_table.splitlines() if line.lstrip().startswith("◆")]
    assert len(marked) == 1 and "-33." in marked[0] and "torch" in marked[0] and "9.9.9" in marked[0]
    # one time per session, duplicates kept: two sessions may start within one second (the set of times lost one)
    session_times = sorted({r["session"]: r["time"] for r in rows}.values())
    assert marked[0].split()[1] == session_times[3]  # the first slow session
    assert "regression" in gate.stderr and TRAIN in gate.stderr
    assert _history_command(hw_project).returncode == 0  # no --fail-on: a report, not a gate

    html = (hw_project.path / "reports" / "report.html").read_text()
    assert 'id="history"' in html and 'class="chart trend"' in html and 'class="changepoint' in html
    assert "9.9.9" in html and "first bad session" in html
    meta = hw_project.results["meta"]["history"]
    validate_schema(hw_project.results, "results")
    assert ({t["status"] for t in meta["trends"]} == {"regression"}
            and all(t["change_points"] == 1 for t in meta["trends"]))
    terminal = slow.stdout.str()  # the last session's, which found the change point
    assert any(line.lstrip().startswith("history regression") and TRAIN in line for line in terminal.splitlines())


def test_no_history_writes_nothing_and_history_dir_moves_it(hw_project):
    hw_project.run("--no-history").assert_outcomes(passed=2)
    assert not (hw_project.path / "reports" / "history").exists()
    result = hw_project.run("--history-dir", "nightly/history")
    result.assert_outcomes(passed=2)
    (path,) = (hw_project.path / "nightly" / "history").glob("*.jsonl")
    assert len(path.read_text().splitlines()) == 2 and f"history ({path.stem}): {path}" in result.stdout.str()


def test_unwritable_history_fails_the_session_but_keeps_the_results(hw_project):
    (hw_project.path / "reports").mkdir()
    (hw_project.path / "reports" / "history").write_text("a file where the history folder should be")
    result = hw_project.run()
    assert result.ret != 0
    assert "history not appended" in result.stdout.str() and "--no-history" in result.stdout.str()
    assert len(hw_project.results["records"]) == 2


def test_a_fifo_or_a_link_to_dev_zero_as_history_file_fails_the_session_naming_file_and_kind(hw_project):
    hw_project.run().assert_outcomes(passed=2)
    (path,) = (hw_project.path / "reports" / "history").glob("*.jsonl")
    for make, kind in ((os.mkfifo, "a FIFO"), (lambda p: p.symlink_to("/dev/zero"), "a character device")):
        path.unlink()
        make(path)
        result = hw_project.run(timeout=240)  # opening a FIFO to append blocks until a reader comes: it must not
        assert result.ret != 0
        assert (f"history not appended to {path.parent}: {path}: is {kind}, not a regular file; this session is "
                "missing from it") in result.stdout.str()
        assert len(hw_project.results["records"]) == 2  # the results are kept


def test_corrupt_history_line_is_skipped_with_a_warning_naming_file_and_line(hw_project):
    hw_project.run().assert_outcomes(passed=2)
    (path,) = (hw_project.path / "reports" / "history").glob("*.jsonl")
    original = path.read_bytes()
    path.write_bytes(original + b'{"torn": \n')
    result = hw_project.run()
    result.assert_outcomes(passed=2)
    assert f"{path}:3: skipped" in result.stdout.str()
    assert path.read_bytes().startswith(original + b'{"torn": \n')  # appended after, never rewritten
    assert len(_history_rows_skipping(path)) == 4


def _history_rows_skipping(path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows

