"""The session's push to the fleet store, end to end: pytester sessions of the suite write their session into the
default SQLite file (with and without ``-n 2``) and into a real PostgreSQL; an unreachable store costs nothing of the
results, queues the session for ``store push``, and fails the session only under ``--require-store``."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from support.schema_check import validate as validate_schema

from hwregress.store.database import open_store

UNREACHABLE = "postgresql+psycopg://ci:secret@127.0.0.1:1/hwregress"  # port 1: nothing listens there


def _store_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stdout.lines if line.startswith(("store:", "hwregress: store"))]


@pytest.mark.slow
def test_a_session_lands_in_the_default_sqlite_store_once(hw_project, xdist_args):
    hw_project.run("--update-baselines", *xdist_args).assert_outcomes(passed=2)
    judged = hw_project.run(*xdist_args)
    judged.assert_outcomes(passed=2)
    store = open_store(f"sqlite:///{hw_project.path / 'reports' / 'hwregress.sqlite'}")
    results = hw_project.results
    sessions = store.sessions()
    assert [s["name"] for s in sessions][-1] == results["meta"]["session"] and len(sessions) == 2
    figures = store.figures(session_ids=[sessions[-1]["id"]])
    throughput = {f["test_id"]: f["median"] for f in figures if f["metric"] == "throughput"}
    assert throughput == pytest.approx({r["test_id"]: r["throughput"] for r in results["records"]})
    assert {f["verdict"] for f in figures} == {"pass"}
    [line] = _store_lines(judged)
    assert line.startswith(f"store: session {results['meta']['session']} pushed (") and "hwregress.sqlite" in line


@pytest.mark.slow
def test_an_unreachable_store_queues_the_session_and_fails_it_only_when_required(hw_project):
    hw_project.run("--update-baselines", "--store=none").assert_outcomes(passed=2)
    assert not (hw_project.path / "reports" / "hwregress.sqlite").exists()  # --store=none: no store at all
    down = hw_project.run(f"--store={UNREACHABLE}")
    down.assert_outcomes(passed=2)
    assert down.ret == 0 and "secret" not in down.stdout.str()
    [line] = _store_lines(down)
    session = hw_project.results["meta"]["session"]
    queued = hw_project.path / "reports" / "store-queue" / f"{session}.json"
    assert line.startswith("hwregress: store not written: postgresql+psycopg://ci:***@127.0.0.1:1/hwregress: ")
    assert f"queued in {queued}" in line and json.loads(queued.read_text()) == hw_project.results
    required = hw_project.run(f"--store={UNREACHABLE}", "--require-store")
    required.assert_outcomes(passed=2)
    assert required.ret == 1 and "(--require-store: the session fails)" in _store_lines(required)[0]
    # results.json holds the records: the journal goes, and the next session finds no dead one
    assert not list((hw_project.path / "reports").glob(".results*.partial.jsonl"))
    later = f"sqlite:///{hw_project.path / 'later.sqlite'}"
    pushed = subprocess.run([sys.executable, "-m", "hwregress", "store", "push", str(queued), "--store", later],
                            capture_output=True, text=True, cwd=hw_project.path)
    assert pushed.returncode == 0, pushed.stderr
    assert [s["name"] for s in open_store(later).sessions()] == [session]


@pytest.mark.slow
@pytest.mark.needs_extra
def test_a_session_lands_in_postgresql(hw_project, postgres_database):
    hw_project.run("--update-baselines", "--store=none").assert_outcomes(passed=2)
    hw_project.run(f"--store={postgres_database}").assert_outcomes(passed=2)
    hw_project.run(env={"HWREGRESS_STORE": postgres_database}).assert_outcomes(passed=2)
    store = open_store(postgres_database)
    assert len(store.sessions()) == 2 and not (hw_project.path / "reports" / "hwregress.sqlite").exists()
    assert {f["test_id"] for f in store.figures()} == {r["test_id"] for r in hw_project.results["records"]}


def history_session(hw_project) -> str:
    """The session results.json names (the last one run)."""
    return hw_project.results["meta"]["session"]


@pytest.mark.slow
def test_the_reports_trends_read_the_fleet_store_with_the_sessions_of_other_runners(hw_project):
    store = f"sqlite:///{hw_project.path / 'fleet.sqlite'}"
    hw_project.run("--update-baselines", f"--store={store}", "--history-dir=runner-a").assert_outcomes(passed=2)
    hw_project.run(f"--store={store}", "--history-dir=runner-a").assert_outcomes(passed=2)
    hw_project.run(f"--store={store}", "--history-dir=runner-b").assert_outcomes(passed=2)  # a runner of its own
    history = hw_project.results["meta"]["history"]
    validate_schema(hw_project.results, "results")
    assert [t["sessions"] for t in history["trends"]] == [3, 3]  # its folder holds 1: the store brings the other 2
    assert history["sources"] == [history["dir"], store] and history["dir"].endswith("runner-b")
    assert 'id="history"' in (hw_project.path / "reports" / "report.html").read_text()

    foreign = copy.deepcopy(hw_project.results)  # another machine of the key: its sessions are not this one's trend
    foreign["meta"].update(session="other-1-20261127T012215Z", hostname="other", machine_id="f" * 32)
    fleet = open_store(store)
    fleet.push(foreign)
    with fleet.engine.begin() as connection:  # a verdict a newer hwregress wrote: left out, never a crash
        connection.exec_driver_sql("UPDATE figures SET verdict = 'flaky' WHERE session_id = "
                                   f"(SELECT id FROM sessions WHERE name = '{history_session(hw_project)}')")
    fleet.close()
    hw_project.run(f"--store={store}", "--no-history").assert_outcomes(passed=2)
    history = hw_project.results["meta"]["history"]
    assert [t["sessions"] for t in history["trends"]] == [3, 3] and history["sources"] == [store]
    assert "dir" not in history and not history["warnings"]

    down = hw_project.run(f"--store={UNREACHABLE}", "--history-dir=runner-a")
    down.assert_outcomes(passed=2)
    history = hw_project.results["meta"]["history"]
    assert [t["sessions"] for t in history["trends"]] == [3, 3]  # runner-a's two and this one
    [warning] = [w for w in history["warnings"] if "not read for the trends" in w]
    assert warning.startswith("fleet store postgresql+psycopg://ci:***@127.0.0.1:1/hwregress not read for the trends")
    assert "secret" not in json.dumps(hw_project.results)


# results.json is written before the push: a failure the collector turns into exit status 1 at the end (a required
# push that failed, a history not appended) must still reach its meta.exitstatus (it said 0).
@pytest.mark.slow
def test_results_json_says_the_exit_status_of_a_session_whose_required_push_failed(hw_project):
    hw_project.run("--update-baselines", "--store=none").assert_outcomes(passed=2)
    required = hw_project.run(f"--store={UNREACHABLE}", "--require-store")
    required.assert_outcomes(passed=2)
    assert required.ret == 1
    meta = hw_project.results["meta"]
    assert meta["exitstatus"] == 1 and meta["store_push"] == "failed"
    archived = sorted((hw_project.path / "reports" / "archive").glob("results-*.json"))[-1]
    assert json.loads(archived.read_text())["meta"]["exitstatus"] == 1


@pytest.mark.slow
def test_results_json_says_the_exit_status_of_a_session_whose_history_was_not_appended(hw_project):
    (hw_project.path / "reports").mkdir()
    (hw_project.path / "reports" / "history").write_text("a file where the history folder should be")
    failed = hw_project.run("--store=none")
    assert failed.ret == 1
    assert hw_project.results["meta"]["exitstatus"] == 1


@pytest.mark.slow
def test_a_session_imported_from_its_history_is_filed_under_the_host_its_push_names(hw_project):
    hw_project.run("--update-baselines").assert_outcomes(passed=2)
    pushed = hw_project.results["meta"]["machine_id"]
    if not pushed:
        pytest.skip("this machine has no /etc/machine-id: its sessions are known by hostname, pushed or imported")
    imported = f"sqlite:///{hw_project.path / 'imported.sqlite'}"
    command = [sys.executable, "-m", "hwregress", "store", "import", "reports/history", "--store", imported]
    done = subprocess.run(command, capture_output=True, text=True, cwd=hw_project.path)
    assert done.returncode == 0, done.stderr
    assert [host["host_id"] for host in open_store(imported).hosts()] == [pushed]
