"""Self-tests of ``scripts/before_after.py``'s pure parts and its process handling: results.json records (written by
the project's own :class:`~hwregress.store.results.SessionResults`, plus the schema-5 ``looks``/``alpha`` fields of the
planned-looks branch) read into per-test figures, the tests whose decision is clear, the timed-rounds and wall-time
ratios over them, the verdicts that differ, the Markdown table, the README's selection, and the busy loops and session
timeout killed by pid. No benchmark runs here."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from support.project import REPO

from hwregress.store.atomic import atomic_write_json
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import Verdict
from scripts.before_after import (
    Session,
    busy_between,
    busy_loops,
    clear_tests,
    cpu_times,
    markdown,
    read_session_figures,
    readme_selection,
    rounds_totals,
    run_command,
    verdict_changes,
    wall_totals,
    window_ratios,
)

GEMM = "bench_tests/test_ceilings.py::test_ceiling[cpu-gemm-fp32]"
NET = "bench_tests/test_throughput.py::test_throughput[cpu-mobilenet_v3_small-infer-bs1-fp32]"
PARITY = "bench_tests/test_parity.py::test_output_parity[cpu-gpt2-fp32]"
CONTENTION = "CPU contention: other processes took 48% of the cores during the window"


def timed(test_id: str, verdict: Verdict, rounds: int, duration_s: float, diagnosis: list[str] | None = None,
          others: float = 0.005) -> TestRecord:
    return TestRecord(test_id=test_id, family="throughput", samples=[100.0] * rounds, rounds=rounds,
                      verdict=verdict, duration_s=duration_s, diagnosis=diagnosis or [],
                      health={"other_cpu_fraction": others, "logical_cores": 2},
                      details={"extended_rounds": rounds - 10, "verdict_rounds": rounds - 10})


def write_results(path: Path, records: list[TestRecord], duration_s: float,
                  looks: dict[str, dict] | None = None) -> Path:
    """A results.json as the plugin writes it (SessionResults.to_json); ``looks`` adds the planned-looks branch's
    schema-5 fields to the named records."""
    data = SessionResults({"duration_s": duration_s, "session": "vm-1-test"}, records).to_json()
    for record in data["records"]:
        if looks and record["test_id"] in looks:
            record["looks"], record["alpha"] = looks[record["test_id"]], 0.002
    if looks:
        data["schema_version"] = 5
    return atomic_write_json(path, data)


def session(tmp_path: Path, tree: str, name: str, records: list[TestRecord], duration_s: float,
            looks: dict[str, dict] | None = None) -> Session:
    path = write_results(tmp_path / tree / name / "results.json", records, duration_s, looks)
    kind = name.rstrip("0123456789")
    return Session(tree=tree, name=name, kind=kind, load=(0.5, 0.4, 0.3), started_at="2026-11-27T00:00:00+00:00",
                   wall_s=duration_s + 2, status="ok", rc=0, duration_s=duration_s,
                   records=read_session_figures(path))


@pytest.fixture
def sessions(tmp_path) -> list[Session]:
    """A/A x2 and one load session per tree: GEMM clear in both (pass, pass, regression), NET unstable in one A/A
    session of the after tree (a verdict change, not clear), the parity test untimed."""
    parity = TestRecord(test_id=PARITY, family="output-parity", verdict=Verdict.PASS, duration_s=6.0)
    out = []
    for index in (1, 2):
        out.append(session(tmp_path, "before", f"aa{index}",
                           [timed(GEMM, Verdict.PASS, 12, 2.4), timed(NET, Verdict.PASS, 10, 1.9), parity], 100.0))
        net_verdict = Verdict.UNSTABLE if index == 2 else Verdict.PASS
        out.append(session(tmp_path, "after", f"aa{index}",
                           [timed(GEMM, Verdict.PASS, 5, 1.6), timed(NET, net_verdict, 10, 1.8), parity], 60.0,
                           looks={GEMM: {"planned": [5, 10, 20, 40], "rounds": [5], "decision": "pass"}}))
    out.append(session(tmp_path, "before", "load1",
                       [timed(GEMM, Verdict.REGRESSION, 100, 14.0, [CONTENTION]),
                        timed(NET, Verdict.REGRESSION, 100, 12.0, [CONTENTION]), parity], 300.0))
    out.append(session(tmp_path, "after", "load1",
                       [timed(GEMM, Verdict.REGRESSION, 40, 6.0, [CONTENTION]),
                        timed(NET, Verdict.REGRESSION, 40, 5.0, [CONTENTION]), parity], 150.0,
                       looks={GEMM: {"planned": [5, 10, 20, 40], "rounds": [5, 10, 20, 40],
                                     "decision": "regression"}}))
    return out


def test_records_of_both_schemas_read_into_figures(sessions):
    before, after = sessions[0].records, sessions[1].records
    assert before[GEMM].rounds == 12 and before[GEMM].looks is None and before[GEMM].extended_rounds == 2
    assert after[GEMM].rounds == 5 and after[GEMM].looks["rounds"] == [5] and after[GEMM].alpha == 0.002
    assert before[PARITY].rounds is None and before[PARITY].verdict == "pass" and before[PARITY].duration_s == 6.0
    load = sessions[-1].records
    assert load[NET].diagnosis == [CONTENTION] and load[GEMM].verdict == "regression"


def test_a_results_file_that_is_no_session_names_its_path(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"records": {"not": "a list"}}))
    with pytest.raises(ValueError, match=rf"{path}: 'records' must be a list"):
        read_session_figures(path)


def test_clear_tests_pass_every_a_a_session_and_regress_under_load_in_both_trees(sessions):
    assert clear_tests(sessions) == [GEMM]


def test_a_failed_session_makes_no_test_clear(sessions):
    failed = [s if not (s.tree == "after" and s.name == "load1") else
              Session(**{**s.__dict__, "status": "timed out after 900 s", "records": {}}) for s in sessions]
    assert clear_tests(failed) == []


def test_timed_rounds_and_wall_time_ratios_over_the_clear_tests(sessions):
    totals = rounds_totals(sessions, [GEMM])
    assert (totals["aa"].before, totals["aa"].after) == (24, 10)
    assert (totals["load"].before, totals["load"].after) == (100, 40)
    assert totals["judged"].ratio == pytest.approx(50 / 124)
    walls = wall_totals(sessions)
    assert walls["aa"].ratio == pytest.approx(120 / 200) and walls["load"].ratio == pytest.approx(0.5)


def test_each_window_of_a_clear_test_gives_its_own_ratio(sessions):
    ratios = window_ratios(sessions, [GEMM])
    assert ratios["aa"] == pytest.approx([5 / 12, 5 / 12]) and ratios["load"] == pytest.approx([0.4])
    text = markdown({"trees": {"before": {"path": "/b", "commit": "abc"}, "after": {"path": "/a", "commit": "def"}},
                     "selection": ["-m", "cpu"], "sessions": [s.to_json() for s in sessions]})
    assert "unchanged sessions: median 0.417 (2 shorter, 0 the same, 0 longer)" in text


def test_a_verdict_that_differs_is_named_with_its_session(sessions):
    changes = verdict_changes(sessions)
    assert [(c.session, c.test_id, c.before, c.after) for c in changes] == [("aa2", NET, "pass", "unstable")]


def test_a_superseded_session_is_shown_and_left_out_of_the_comparison(sessions, tmp_path):
    shared = session(tmp_path, "after", "aa1", [timed(GEMM, Verdict.REGRESSION, 100, 14.0, [CONTENTION], others=0.5),
                                                timed(NET, Verdict.PASS, 10, 1.9)], 400.0)
    assert shared.shared() and shared.others_cpu() == 0.5 and not sessions[1].shared()
    shared.superseded = True
    with_retry = [*sessions[:1], shared, *sessions[1:]]
    assert verdict_changes(with_retry) == verdict_changes(sessions)
    assert clear_tests(with_retry) == [GEMM] and wall_totals(with_retry)["aa"].after == 120
    text = markdown({"trees": {"before": {"path": "/b", "commit": "abc"}, "after": {"path": "/a", "commit": "def"}},
                     "selection": ["-m", "cpu"], "sessions": [s.to_json() for s in with_retry]})
    assert "| 50% |" in text and "superseded: the machine was shared" in text


def test_a_test_missing_from_one_tree_is_a_change(sessions):
    cut = [Session(**{**s.__dict__, "records": {k: v for k, v in s.records.items() if k != PARITY}})
           if s.tree == "after" and s.name == "load1" else s for s in sessions]
    assert ("load1", PARITY, "pass", "absent") in [(c.session, c.test_id, c.before, c.after)
                                                   for c in verdict_changes(cut)]


def test_the_markdown_table_has_a_row_per_timed_test_and_the_ratios(sessions):
    text = markdown({"trees": {"before": {"path": "/b", "commit": "abc"}, "after": {"path": "/a", "commit": "def"}},
                     "selection": ["-m", "cpu"], "sessions": [s.to_json() for s in sessions]})
    rows = [line for line in text.splitlines() if line.startswith("| test_")]
    assert len(rows) == 2  # the two timed tests; the parity test has no rounds
    gemm_row = next(row for row in rows if "cpu-gemm-fp32" in row)
    assert "12 12 → 5 5" in gemm_row and "100 → 40" in gemm_row and "yes" in gemm_row
    assert "timed rounds after/before over the 1 clear test(s)" in text and "0.403" in text
    assert "aa2: test_throughput[cpu-mobilenet_v3_small-infer-bs1-fp32] pass → unstable" in text
    assert "CPU contention" in text


def test_the_selection_is_the_readme_quick_start_s(tmp_path):
    assert readme_selection(REPO) == ["-m", "cpu"]
    (tmp_path / "README.md").write_text("# x\n\n## Quick start\n\n```bash\npip install x\n```\n")
    with pytest.raises(ValueError, match=r"README.md: its quick start's first command runs no pytest"):
        readme_selection(tmp_path)


def test_cpu_time_busy_is_all_but_idle_and_iowait():
    first = cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\nintr 1\n")
    second = cpu_times("cpu  250 0 150 850 150 0 0 0 0 0\n")
    assert first == (200, 1000) and second == (400, 1400)
    assert busy_between(first, second) == pytest.approx(0.5)
    assert busy_between(second, second) == 0.0
    with pytest.raises(ValueError, match="/proc/stat: no 'cpu' line"):
        cpu_times("intr 1\n")


def dead(pid: int) -> bool:
    """No process ``pid``, or only its zombie (a container's init may never reap an orphan)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def test_busy_loops_are_killed_by_pid_when_the_session_raises():
    with pytest.raises(RuntimeError), busy_loops(2) as pids:
        assert len(pids) == 2 and not any(dead(pid) for pid in pids)
        raise RuntimeError("the session broke")
    assert all(dead(pid) for pid in pids)


def test_a_session_past_its_timeout_is_killed_with_its_children(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(child_pid)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    started = time.monotonic()
    outcome = run_command([sys.executable, "-c", script], tmp_path, dict(os.environ), 3, tmp_path / "log")
    assert outcome.timed_out and outcome.rc is None
    assert time.monotonic() - started < 30
    pid = int(child_pid.read_text())
    for _ in range(50):  # the killed child is reaped by init, not by us
        if dead(pid):
            break
        time.sleep(0.1)
    assert dead(pid)


def test_a_session_that_exits_reports_its_code(tmp_path):
    outcome = run_command([sys.executable, "-c", "import sys; print('hi'); sys.exit(1)"], tmp_path,
                          dict(os.environ), 30, tmp_path / "log")
    assert (outcome.rc, outcome.timed_out) == (1, False)
    assert (tmp_path / "log").read_text().strip() == "hi"


def test_a_session_killed_by_a_signal_reports_minus_the_signal():
    outcome = run_command([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                          Path.cwd(), dict(os.environ), 30, Path(os.devnull))
    assert outcome.rc == -signal.SIGTERM
