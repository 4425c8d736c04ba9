"""``python -m hwregress history`` and ``report render|merge --history-dir``: statuses and exit codes on synthetic
step, drift and steady histories, the filters, one-line errors, skipped lines, and the trend section of the page."""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.history_rows import ROW_SCHEMA, wrong_values

from hwregress.cli import main
from hwregress.report.history_table import CHANGE_MARK
from hwregress.store.history import HistoryStore
from hwregress.store.history_row import HISTORY_ROW_VERSION
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict

TEST_ID = "bench_tests/test_throughput.py::test_train[tiny-bs4-fp32]"
OTHER_TEST_ID = "bench_tests/test_throughput.py::test_infer[tiny-bs4-fp32]"
START = _dt.datetime(2026, 3, 1, 2, 0, tzinfo=_dt.timezone.utc)
BASELINE_RECORDED_AT = (START - _dt.timedelta(days=1)).isoformat()
BASELINE = 100.0  # samples/s
NOISE = 0.003  # relative session-to-session noise of the synthetic medians (below the change-point noise floor)
STEP_AT = 10  # the first slow session of the step history
SESSION_LINE = re.compile(rf"^\s+[{CHANGE_MARK} ] \d{{4}}-\d\d-\d\dT")


def session_time(index: int) -> str:
    """The UTC ISO 8601 time of session ``index`` (one day apart from START)."""
    return (START + _dt.timedelta(days=index)).isoformat()


def history_row(index: int, median: float, *, key: str = "cpu-a", test_id: str = TEST_ID, torch: str = "2.4.0",
                verdict: str = "pass") -> dict[str, Any]:
    """One valid history row of session ``index``: ``median`` in samples/s, quartiles +-0.4% around it, judged
    against BASELINE recorded the day before the first session."""
    spread = median * 0.004
    return {
        "v": HISTORY_ROW_VERSION, "session": f"session-{index:02d}", "time": session_time(index), "test_id": test_id,
        "hardware_key": key, "device": "cpu", "device_name": f"CPU {key}", "identity": {"cpu_family": 25},
        "hwregress_version": "0.9.0", "environment": {"torch": torch, "python": "3.11.9"},
        "packages": "0123456789abcdef",
        "unit": "samples/s", "median": median, "q1": median - spread, "q3": median + spread, "iqr": 2 * spread, "n": 8,
        "verdict": verdict, "ratio": median / BASELINE, "threshold": 0.05, "baseline_median": BASELINE,
        "baseline_recorded_at": BASELINE_RECORDED_AT, "telemetry": {}, "health": {}, "diagnosis": [],
    }


def noisy(levels: list[float], seed: int) -> list[float]:
    """``levels`` times (1 + N(0, NOISE)), reproducibly."""
    rng = np.random.default_rng(seed)
    return [level * (1.0 + NOISE * float(rng.standard_normal())) for level in levels]


def step_rows(key: str = "cpu-a", test_id: str = TEST_ID) -> list[dict[str, Any]]:
    """20 sessions: 100 samples/s, then 10% slower from session STEP_AT on, where torch changed and every
    session's own verdict was a regression."""
    medians = noisy([BASELINE if i < STEP_AT else 0.9 * BASELINE for i in range(20)], seed=1)
    return [history_row(i, m, key=key, test_id=test_id, torch="2.4.0" if i < STEP_AT else "2.5.0",
                        verdict="pass" if i < STEP_AT else "regression") for i, m in enumerate(medians)]


def drift_rows(key: str = "cpu-a", test_id: str = TEST_ID) -> list[dict[str, Any]]:
    """15 sessions losing 1% each, every one within its own per-run threshold (verdict pass)."""
    medians = noisy([BASELINE * 0.99**i for i in range(15)], seed=2)
    return [history_row(i, m, key=key, test_id=test_id) for i, m in enumerate(medians)]


def steady_rows(key: str = "cpu-a", test_id: str = TEST_ID) -> list[dict[str, Any]]:
    """15 sessions at the baseline level, low noise."""
    return [history_row(i, m, key=key, test_id=test_id) for i, m in enumerate(noisy([BASELINE] * 15, seed=3))]


def history_dir(directory: Path, *groups: list[dict[str, Any]]) -> Path:
    """A history folder holding ``groups`` of rows, each appended to its rows' hardware key file."""
    store = HistoryStore(directory)
    for rows in groups:
        store.append(rows[0]["hardware_key"], rows)
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``python -m hwregress *argv``."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def session_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if SESSION_LINE.match(line)]


def one_error(err: str, *names: str) -> str:
    """The single stderr line of a failed command: ``hwregress: <file>: <what> (<fix>)`` naming every ``names``."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hwregress: ") and lines[0].endswith(")"), err
    assert "Traceback" not in err and all(str(name) in lines[0] for name in names), err
    return lines[0]


# -- statuses and exit codes -----------------------------------------------------------------------------------
def test_step_history_is_a_regression_with_the_first_slow_session_marked(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    status, out, err = run(capsys, "history", "--dir", str(directory), "--fail-on", "regression")
    assert status == 1
    assert TEST_ID in out
    marked = [line for line in out.splitlines() if line.lstrip().startswith(CHANGE_MARK)]
    assert len(marked) == 1, out
    assert session_time(STEP_AT) in marked[0] and "torch 2.4.0 -> 2.5.0" in marked[0]
    assert "-10." in marked[0] or "-9." in marked[0]  # the size of the step, about -10%
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 regression"
    assert "regression" in err and TEST_ID in err and "cpu-a" in err
    assert run(capsys, "history", "--dir", str(directory))[0] == 0  # no gate asked for


def test_a_step_under_the_tolerance_sets_no_status(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--tolerance", "0.2", "--fail-on", "regression")
    assert status == 0, out
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 steady"


def test_slow_drift_fails_drift_and_regression_gates(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", drift_rows())
    status, out, err = run(capsys, "history", "--dir", str(directory), "--fail-on", "drift")
    assert status == 1, out
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 drift"
    assert "drift" in err and TEST_ID in err
    assert run(capsys, "history", "--dir", str(directory), "--fail-on", "regression")[0] == 1


def test_a_ramp_cut_into_steps_marks_them_not_significant(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", drift_rows())
    out = run(capsys, "history", "--dir", str(directory), "--last", "15")[1]
    weak = [line for line in out.splitlines() if line.lstrip().startswith("◇")]
    assert weak and all("not significant" in line for line in weak)
    assert not [line for line in out.splitlines() if line.lstrip().startswith("◆")]


def test_steady_history_passes_every_gate(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    status, out, err = run(capsys, "history", "--dir", str(directory), "--fail-on", "any")
    assert status == 0, out + err
    assert err == ""
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 steady"
    assert not [line for line in out.splitlines() if line.lstrip().startswith(CHANGE_MARK)]


def test_counts_line_orders_statuses_by_concern(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows(test_id=OTHER_TEST_ID), step_rows())
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--fail-on", "regression")
    assert status == 1
    assert out.rstrip().splitlines()[-1] == "2 tests: 1 regression, 1 steady"
    assert out.index(TEST_ID) < out.index(OTHER_TEST_ID)  # worst first


# -- filters -----------------------------------------------------------------------------------------------------
def test_test_filter_selects_by_substring(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows(test_id=OTHER_TEST_ID), step_rows())
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--test", "test_infer", "--fail-on", "regression")
    assert status == 0  # the regressed test is filtered out
    assert OTHER_TEST_ID in out and TEST_ID not in out
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 steady"


def test_key_filter_selects_among_keys(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows(key="cpu-a"), steady_rows(key="cpu-b"))
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--key", "cpu-b", "--fail-on", "regression")
    assert status == 0
    headings = [line for line in out.splitlines() if TEST_ID in line and "sessions)" in line]
    assert len(headings) == 1 and headings[0].startswith("cpu-b  ")
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--key", "cpu-a", "--key", "cpu-b")
    assert status == 0 and out.rstrip().splitlines()[-1] == "2 tests: 1 regression, 1 steady"


def test_unknown_key_names_the_known_ones(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows(key="cpu-a"), steady_rows(key="cpu-b"))
    status, out, err = run(capsys, "history", "--dir", str(directory), "--key", "gpu-z")
    assert status == 2 and out == ""
    assert "known: cpu-a, cpu-b" in one_error(err, directory, "gpu-z")


def test_test_filter_matching_nothing_is_an_error(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    status, _, err = run(capsys, "history", "--dir", str(directory), "--test", "no-such-test")
    assert status == 2
    assert "no test in the history matches" in one_error(err, directory, "no-such-test")


def test_since_after_every_session_is_an_error(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    status, _, err = run(capsys, "history", "--dir", str(directory), "--since", "2027-01-01")
    assert status == 2
    assert "since 2027-01-01" in one_error(err, directory)


def test_since_in_the_middle_shows_only_later_sessions(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--since", session_time(15)[:10])
    assert status == 0
    lines = session_lines(out)
    assert len(lines) == 5 and all(any(session_time(i) in line for line in lines) for i in range(15, 20))
    assert session_time(14) not in out.split("session (UTC)", 1)[1]
    assert "(15 earlier session(s) not shown; the analysis used all 20)" in out
    assert "1 regression" in out.rstrip().splitlines()[-1]  # the analysis still saw the step


def test_last_shows_that_many_sessions(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--last", "3")
    assert status == 0
    lines = session_lines(out)
    assert len(lines) == 3 and session_time(14) in lines[-1] and session_time(12) in lines[0]
    assert "(12 earlier session(s) not shown" in out


def test_window_analyses_the_latest_sessions_and_zero_every_one(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())  # the 10% step at STEP_AT of 20 sessions
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--window", str(20 - STEP_AT), "--format", "json")
    windowed = json.loads(out)["tests"][0]
    assert status == 0 and (windowed["sessions"], windowed["earlier_sessions"]) == (20 - STEP_AT, STEP_AT)
    assert windowed["change_points"] == [] and windowed["status"] == "regression"  # the window is all after the step
    assert windowed["summary"].endswith(f"; analysed the latest {20 - STEP_AT} of 20 sessions")
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--window", "0", "--format", "json")
    everything = json.loads(out)["tests"][0]
    assert (everything["sessions"], everything["earlier_sessions"]) == (20, 0) and len(everything["change_points"]) == 1
    status, out, _ = run(capsys, "history", "--dir", str(directory), "--window", "12")
    assert "(samples/s, 12 sessions, 8 earlier not analysed (--window))" in out


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--since", "last tuesday", "is not a date or time"),
    ("--last", "0", "is not a whole number >= 1"),
    ("--last", "-3", "is not a whole number >= 1"),
    ("--tolerance", "0", "must be above 0"),
    ("--window", "-1", "is not a number of sessions to analyse; give 3 or more, 0 for all"),
    ("--window", "all", "is not a number of sessions to analyse"),
    ("--window", "2", "is not a number of sessions to analyse"),
    ("--tolerance", "1.5", "is not a fraction in [0, 1)"),
    ("--tolerance", "nan", "is not a fraction in [0, 1)"),
])
def test_bad_option_values_are_one_line_errors(tmp_path, capsys, option, value, expected):
    directory = history_dir(tmp_path / "history", steady_rows())
    status, out, err = run(capsys, "history", "--dir", str(directory), f"{option}={value}")
    assert status == 2 and out == ""
    assert expected in one_error(err, option)


# -- the history folder ----------------------------------------------------------------------------------------
def test_missing_history_folder_is_an_error(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    status, out, err = run(capsys, "history", "--dir", str(missing))
    assert status == 2 and out == ""
    assert "no such history folder" in one_error(err, missing)


def test_corrupt_line_is_skipped_with_a_warning_and_the_rest_analysed(tmp_path, capsys):
    rows = step_rows()
    store = HistoryStore(tmp_path / "history")
    path = store.append("cpu-a", rows[:12])
    with path.open("a", encoding="utf-8") as stream:
        stream.write('{"v": 1, "session": "torn\n')  # line 13
    store.append("cpu-a", rows[12:])
    status, out, err = run(capsys, "history", "--dir", str(store.directory), "--fail-on", "regression")
    assert status == 1
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and f"{path}:13:" in warnings[0] and "skipped" in warnings[0]
    assert f"{TEST_ID}  (samples/s, 20 sessions)" in out  # every other line counted
    assert out.rstrip().splitlines()[-1] == "1 tests: 1 regression"


def test_empty_history_folder_is_an_error(tmp_path, capsys):
    empty = tmp_path / "history"
    empty.mkdir()
    status, out, err = run(capsys, "history", "--dir", str(empty))
    assert status == 2 and out == ""
    assert "run a session first" in one_error(err, empty)


def test_a_hidden_jsonl_file_in_the_folder_does_not_break_the_command(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    (directory / ".backup.jsonl").write_bytes((directory / "cpu-a.jsonl").read_bytes())
    status, out, err = run(capsys, "history", "--dir", str(directory))
    assert status == 0, err
    assert "unexpected" not in err and out.rstrip().splitlines()[-1] == "1 tests: 1 regression"


@pytest.mark.parametrize(("name", "value"), [(name, wrong_values(field)[0])
                                             for name, field in ROW_SCHEMA["properties"].items()])
def test_a_row_with_a_field_of_the_wrong_type_is_skipped_with_a_warning_and_the_rest_analysed(tmp_path, capsys,
                                                                                             name, value):
    rows = steady_rows()
    rows[-1][name] = value  # the latest session: the one the table shows first
    directory = history_dir(tmp_path / "history", rows)
    status, out, err = run(capsys, "history", "--dir", str(directory))
    assert status == 0, err
    (warning,) = err.splitlines()
    assert warning.startswith(f"hwregress: warning: {directory / 'cpu-a.jsonl'}:15: skipped: "), warning
    assert f"'{name}'" in warning or (name == "v" and "row version" in warning), warning
    assert f"{TEST_ID}  (samples/s, 14 sessions)" in out and out.rstrip().endswith("1 tests: 1 steady")


def test_a_fifo_and_a_link_to_dev_zero_in_the_folder_are_named_with_their_kind(tmp_path):
    directory = history_dir(tmp_path / "history", steady_rows())
    os.mkfifo(directory / "fifo-key.jsonl")
    (directory / "zero-key.jsonl").symlink_to("/dev/zero")
    # a child with a deadline: opening a FIFO to read blocks until a writer comes
    done = subprocess.run([sys.executable, "-m", "hwregress", "history", "--dir", str(directory)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"hwregress: warning: {directory / 'fifo-key.jsonl'}: history not read: is a FIFO, not a regular file "
        "(a history file is a regular file; move this one out of the folder)",
        f"hwregress: warning: {directory / 'zero-key.jsonl'}: history not read: is a character device, not a regular "
        "file (a history file is a regular file; move this one out of the folder)"]
    assert done.stdout.rstrip().endswith("1 tests: 1 steady")


# -- report render / merge --history-dir -------------------------------------------------------------------------
def results_file(path: Path, key: str, throughput: float = 90.0) -> Path:
    """A results.json with one measured record of TEST_ID on ``key``."""
    record = TestRecord(TEST_ID, hardware_key=key, device="cpu", device_name=f"CPU {key}", model="tiny", mode="train",
                        batch_size=4, dtype="fp32", throughput=throughput, samples=[throughput] * 5,
                        baseline_throughput=BASELINE, ratio=throughput / BASELINE, threshold=0.05,
                        verdict=Verdict.REGRESSION, environment={"torch": "2.5.0"})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SessionResults({"hostname": key}, [record]).to_json()))
    return path


def test_render_with_history_dir_adds_the_trend_section(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    results = results_file(tmp_path / "reports" / "results.json", "cpu-a")
    page = tmp_path / "out.html"
    status, out, err = run(capsys, "report", "render", str(results), "-o", str(page), "--history-dir", str(directory))
    assert status == 0, err
    assert f"wrote {page} (1 tests)" in out
    text = page.read_text(encoding="utf-8")
    assert 'id="history"' in text and text.count('class="chart trend"') == 1
    assert "torch 2.4.0 -&gt; 2.5.0" in text or "torch 2.4.0 -> 2.5.0" in html.unescape(text)
    assert session_time(STEP_AT) in text and str(directory) in text
    plain = page.with_name("plain.html")
    assert run(capsys, "report", "render", str(results), "-o", str(plain))[0] == 0
    plain_text = plain.read_text(encoding="utf-8")
    assert 'id="history"' not in plain_text and 'class="chart trend"' not in plain_text


def test_render_draws_a_chart_for_a_moved_test_and_folds_a_steady_one_into_a_sparkline_row(tmp_path, capsys):
    steady_id = TEST_ID.replace("train", "infer")
    directory = history_dir(tmp_path / "history", step_rows(), steady_rows(test_id=steady_id))
    results = results_file(tmp_path / "reports" / "results.json", "cpu-a")
    session = json.loads(results.read_text())
    session["records"].append({**session["records"][0], "test_id": steady_id, "verdict": "pass", "ratio": 1.0})
    results.write_text(json.dumps(session))
    page = tmp_path / "out.html"
    assert run(capsys, "report", "render", str(results), "-o", str(page), "--history-dir", str(directory))[0] == 0
    text = page.read_text(encoding="utf-8")
    history = text.split('id="history"', 1)[1]
    assert history.count('class="chart trend"') == 1 and history.count('<section class="trend"') == 1
    folded = history.split('<details class="steady-history">', 1)[1].split("</details>", 1)[0]
    assert "1 test\nwhose history did not move" in folded and 'class="spark' in folded
    assert steady_id.rsplit("::", 1)[-1] in folded and TEST_ID.rsplit("::", 1)[-1] not in folded


def test_render_shows_skipped_history_lines(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", step_rows())
    with (directory / "cpu-a.jsonl").open("a", encoding="utf-8") as stream:
        stream.write("not json\n")  # line 21
    results = results_file(tmp_path / "results.json", "cpu-a")
    page = tmp_path / "out.html"
    assert run(capsys, "report", "render", str(results), "-o", str(page), "--history-dir", str(directory))[0] == 0
    assert "cpu-a.jsonl:21: skipped" in page.read_text(encoding="utf-8")


def test_render_with_a_missing_history_dir_is_an_error(tmp_path, capsys):
    results = results_file(tmp_path / "results.json", "cpu-a")
    missing, page = tmp_path / "no-history", tmp_path / "out.html"
    status, _, err = run(capsys, "report", "render", str(results), "-o", str(page), "--history-dir", str(missing))
    assert status == 2
    assert "no such history folder" in one_error(err, missing)
    assert not page.exists()


def legend_labels(chart: str) -> list[str]:
    return re.findall(r'class="legend"><title>([^<]*)</title>', chart)


def test_merge_puts_both_machines_in_one_trend_chart(tmp_path, capsys):
    first = history_dir(tmp_path / "a" / "history", step_rows(key="cpu-a"))
    second = history_dir(tmp_path / "b" / "history", steady_rows(key="cpu-b"))
    results_a = results_file(tmp_path / "a" / "results.json", "cpu-a")
    results_b = results_file(tmp_path / "b" / "results.json", "cpu-b", throughput=100.0)
    page = tmp_path / "merged.html"
    status, out, err = run(capsys, "report", "merge", str(results_a), str(results_b), "-o", str(page),
                           "--history-dir", str(first), "--history-dir", str(second))
    assert status == 0, err
    assert "2 machines" in out
    text = page.read_text(encoding="utf-8")
    charts = re.findall(r'<svg class="chart trend".*?</svg>', text, flags=re.S)
    assert len(charts) == 1 and 'id="history"' in text
    assert {"cpu-a", "cpu-b"} <= set(legend_labels(charts[0]))
    assert charts[0].count("<polyline") == 2  # one median line per machine
    assert "torch 2.4.0 -&gt; 2.5.0" in text or "torch 2.4.0 -> 2.5.0" in html.unescape(text)


@pytest.mark.parametrize("second", ["same", "copy"])
def test_merge_draws_a_key_held_by_two_history_dirs_once(tmp_path, capsys, second):
    directory = history_dir(tmp_path / "history", step_rows(key="cpu-a"))
    other = directory
    if second == "copy":
        other = history_dir(tmp_path / "copy", step_rows(key="cpu-a"))
    results = results_file(tmp_path / "results.json", "cpu-a")
    page = tmp_path / "merged.html"
    status, _, err = run(capsys, "report", "merge", str(results), "-o", str(page),
                         "--history-dir", str(directory), "--history-dir", str(other))
    assert status == 0, err
    (chart,) = re.findall(r'<svg class="chart trend".*?</svg>', page.read_text(encoding="utf-8"), flags=re.S)
    assert chart.count("<polyline") == 1


# -- history append: an archived journal into the history -------------------------------------------------------------
DEAD_SESSION, DEAD_START = "host-4242-20260316T020000Z", "2026-03-16T02:00:00+00:00"  # after steady_rows


def archived_journal(path: Path, *test_ids: str, header: bool = True, died_in: str | None = "t-last",
                     **header_fields: Any) -> Path:
    """A journal as a killed session leaves it and the next session archives it: header (with ``header_fields``),
    then per test its running line and its record (samples in samples/s on hardware key cpu-a), then the test it died
    in."""
    lines = [{"journal": 1, "session": DEAD_SESSION, "pid": 4242, "host": "host", "started_at": DEAD_START,
              **header_fields}][:header]
    for index, test_id in enumerate(test_ids):
        record = TestRecord(test_id, hardware_key="cpu-a", device="cpu", unit="samples/s", verdict=Verdict.PASS,
                            samples=[100.0 + index, 101.0 + index, 99.0 + index])
        lines += [{"running": test_id}, record.to_json()]
    lines += [{"running": died_in}] if died_in else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_history_append_prints_a_session_name_with_a_control_character_escaped(tmp_path, capsys):
    # a hand-edited journal's session name was printed raw: its newline broke the line in two
    directory = history_dir(tmp_path / "history", steady_rows())
    journal = archived_journal(tmp_path / "archive" / "results-20260301-020000-x-unfinished.jsonl", TEST_ID,
                               session="host\nforged")
    status, out, err = run(capsys, "history", "append", str(journal), "--dir", str(directory))
    assert (status, err) == (0, "")
    assert out == (f"{journal}: session 'host\\nforged' (started {DEAD_START}, interrupted): 1 rows appended to "
                   f"{directory}\n")


def test_history_append_brings_an_archived_journal_in_once_marked_interrupted(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    journal = archived_journal(tmp_path / "archive" / "results-20260301-020000-x-unfinished.jsonl", TEST_ID,
                               OTHER_TEST_ID, hwregress_version="0.0.9")
    status, out, err = run(capsys, "history", "append", str(journal), "--dir", str(directory))
    assert (status, err) == (0, "")
    assert out == (f"{journal}: session {DEAD_SESSION} (started {DEAD_START}, interrupted): 2 rows appended to "
                   f"{directory}\n")
    recovered = [row for row in HistoryStore(directory).read("cpu-a").rows if row["session"] == DEAD_SESSION]
    assert [(r["test_id"], r["time"], r["interrupted"], r["median"], r["hwregress_version"]) for r in recovered] == [
        (TEST_ID, DEAD_START, True, 100.0, "0.0.9"), (OTHER_TEST_ID, DEAD_START, True, 101.0, "0.0.9")]

    before = (directory / "cpu-a.jsonl").read_bytes()
    status, out, _ = run(capsys, "history", "append", str(journal), "--dir", str(directory))
    assert status == 0 and out.endswith(f"0 rows appended to {directory}, 2 already there\n")
    assert (directory / "cpu-a.jsonl").read_bytes() == before

    status, out, _ = run(capsys, "history", "--dir", str(directory), "--test", "test_train")
    (line,) = [line for line in session_lines(out) if DEAD_START[:19] in line]
    assert status == 0 and line.endswith("interrupted session")
    page = tmp_path / "dashboard.html"
    assert run(capsys, "history", "render", "--dir", str(directory), "-o", str(page))[0] == 0
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert text.count("(1 interrupted session)") == 2  # both tests are steady: their rows count it

    slow = [history_row(i, 80.0) for i in range(16, 21)]  # a step after it: the test's chart marks the session
    HistoryStore(directory).append("cpu-a", slow)
    assert run(capsys, "history", "render", "--dir", str(directory), "-o", str(page))[0] == 0
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert f"{DEAD_START}, pass, interrupted session, median 100" in text and text.count("interrupted session)") == 1
    results = results_file(tmp_path / "reports" / "results.json", "cpu-a")  # the report's History section too
    assert run(capsys, "report", "render", str(results), "-o", str(page), "--history-dir", str(directory))[0] == 0
    assert f"{DEAD_START}, pass, hwregress 0.0.9, interrupted session" in html.unescape(page.read_text("utf-8"))


def test_history_append_of_a_journal_that_does_not_name_its_version_leaves_the_version_out(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())  # rows of hwregress 0.9.0
    journal = archived_journal(tmp_path / "old.jsonl", TEST_ID)  # a header of hwregress <= 0.1: no version
    assert run(capsys, "history", "append", str(journal), "--dir", str(directory))[0] == 0
    (row,) = [row for row in HistoryStore(directory).read("cpu-a").rows if row["session"] == DEAD_SESSION]
    assert "hwregress_version" not in row  # unknown, not the version of the hwregress that appended it


def test_history_append_of_a_journal_without_header_is_named_by_its_content(tmp_path, capsys):
    directory = history_dir(tmp_path / "history", steady_rows())
    journal = archived_journal(tmp_path / "old.jsonl", TEST_ID, header=False, died_in=None)
    status, out, _ = run(capsys, "history", "append", str(journal), "--dir", str(directory))
    assert status == 0 and "1 rows appended" in out
    (row,) = [row for row in HistoryStore(directory).read("cpu-a").rows if row.get("interrupted")]
    assert re.fullmatch(r"journal-[0-9a-f]{16}", row["session"])
    assert row["time"] == _dt.datetime.fromtimestamp(journal.stat().st_mtime, _dt.timezone.utc).isoformat(
        timespec="seconds")
    assert run(capsys, "history", "append", str(journal), "--dir", str(directory))[1].endswith("1 already there\n")


def test_history_append_refuses_the_journal_of_a_session_still_running(tmp_path, capsys):
    from hwregress.store.journal import Journal

    directory = history_dir(tmp_path / "history", steady_rows())
    live = Journal.start(tmp_path / "reports", history_dir=directory)  # holds its lock, as a running session does
    try:
        live.append(TestRecord(TEST_ID, hardware_key="cpu-a", unit="samples/s", samples=[100.0, 101.0, 99.0]))
        before = (directory / "cpu-a.jsonl").read_bytes()
        status, out, err = run(capsys, "history", "append", str(live.path), "--dir", str(directory))
        assert (status, out) == (2, "")
        assert "a running session is still writing it" in one_error(err, live.path)
        assert (directory / "cpu-a.jsonl").read_bytes() == before  # its session appends its rows itself, unmarked
    finally:
        live.close(remove=True)


@pytest.mark.parametrize("option", [["--fail-on", "regression"], ["--format", "json"], ["--key", "cpu-a"],
                                    ["--test", "train"], ["--status", "regression"], ["--since", "2026-03-01"],
                                    ["--last", "3"], ["--tolerance", "0.1"], ["--window", "5"],
                                    ["--host", "runner-1"]],
                         ids=lambda option: option[0])
def test_history_append_refuses_the_options_it_would_ignore(tmp_path, capsys, option):
    directory = history_dir(tmp_path / "history", steady_rows())
    journal = archived_journal(tmp_path / "old.jsonl", TEST_ID)
    before = (directory / "cpu-a.jsonl").read_bytes()
    status, out, err = run(capsys, "history", "append", str(journal), "--dir", str(directory), *option)
    assert (status, out) == (2, "")
    assert f"hwregress: {option[0]}: is not an option of `history append`" in one_error(err)
    assert (directory / "cpu-a.jsonl").read_bytes() == before


@pytest.mark.parametrize(("argv", "expected"), [
    (["history", "append"], "needs the archived journal"),
    (["history", "render", "x.jsonl", "-o", "d.html"], "only `history append` takes journals"),
    (["history", "append", "{missing}"], "cannot open: No such file"),
    (["history", "append", "{results}"], "is not a hwregress journal"),
])
def test_history_append_errors_are_one_line(tmp_path, capsys, argv, expected):
    directory = history_dir(tmp_path / "history", steady_rows())
    results = tmp_path / "results.json"
    results.write_text(json.dumps(SessionResults({}, [TestRecord("t")]).to_json(), indent=1), encoding="utf-8")
    argv = [a.format(missing=tmp_path / "none.jsonl", results=results) for a in argv]
    before = (directory / "cpu-a.jsonl").read_bytes()
    status, out, err = run(capsys, *argv, "--dir", str(directory))
    assert status == 2 and out == "" and expected in one_error(err)
    assert (directory / "cpu-a.jsonl").read_bytes() == before
