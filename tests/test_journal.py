"""The per-session journal: its own file and lock per session, only dead sessions archived, the test a
killed session died in, and any bytes read back without a traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from filelock import FileLock, Timeout
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hwregress.store.history import HistoryStore, read_history
from hwregress.store.journal import (
    LEGACY_NAME,
    Journal,
    JournalError,
    archive_dead_journals,
    journal_paths,
    load_journal,
    record_problem,
)
from hwregress.store.results import SessionResults, TestRecord

# A child session driven line by line over stdin/stdout: no sleeps, no timing assumptions.
CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from hwregress.store.history import HistoryStore
    from hwregress.store.journal import Journal, archive_dead_journals
    from hwregress.store.results import TestRecord
    report = Path(sys.argv[1])
    journal = None
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "start":  # start [HISTORY_DIR]: a dead session's records go to that history
            history = [HistoryStore(argument)] if argument else []
            dead = archive_dead_journals(report, report / "archive", *history)
            journal = Journal.start(report)
            reply = {"journal": str(journal.path), "archived": [d.session for d in dead]}
        elif command == "run":
            journal.mark_running(argument)
            reply = {}
        elif command == "record":
            journal.append(TestRecord(argument, throughput=1.0, samples=[1.0, 1.1, 0.9], hardware_key="cpu-k"))
            reply = {}
        elif command == "close":
            journal.close(remove=True)
            reply = {}
        print(json.dumps(reply), flush=True)
""")


class Child:
    def __init__(self, report: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", CHILD, str(report)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)

    def ask(self, command: str) -> dict:
        self.send(command)
        return self.reply()

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def reply(self) -> dict:
        assert self.process.stdout is not None
        return json.loads(self.process.stdout.readline())

    def finish(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(60) == 0


def test_start_writes_a_header_and_holds_a_lock(tmp_path):
    journal = Journal.start(tmp_path)
    assert journal.path.name == f".results.{journal.session}.partial.jsonl"
    header = json.loads(journal.path.read_text().splitlines()[0])
    assert header["journal"] == 1 and header["session"] == journal.session and isinstance(header["pid"], int)
    assert {"host", "started_at"} <= set(header)
    with pytest.raises(Timeout):
        FileLock(str(journal.lock_path), timeout=0).acquire()
    assert archive_dead_journals(tmp_path, tmp_path / "archive") == []  # live: untouched
    assert journal_paths(tmp_path) == [journal.path]
    journal.close(remove=True)
    assert list(tmp_path.iterdir()) == []  # journal and lock file gone


def test_two_processes_sharing_a_report_folder_leave_each_other_alone(tmp_path):
    first, second = Child(tmp_path), Child(tmp_path)
    try:
        first_journal = Path(first.ask("start")["journal"])
        first.ask("run t1")
        first.ask("record t1")
        started = second.ask("start")
        assert started["archived"] == []  # the first is alive: its journal is not archived
        second_journal = Path(started["journal"])
        assert first_journal.exists() and second_journal != first_journal
        second.ask("run s1")
        before = second_journal.read_bytes()
        first.ask("close")
        first.finish()
        assert not first_journal.exists()
        assert second_journal.read_bytes() == before  # the first ending did not touch the second's
        assert archive_dead_journals(tmp_path, tmp_path / "archive") == []  # the second is still alive
        second.ask("close")
        second.finish()
    finally:
        for child in (first, second):
            if child.process.poll() is None:
                child.process.kill()
    assert not (tmp_path / "archive").exists() and list(tmp_path.iterdir()) == []


def test_a_killed_session_is_archived_with_the_test_it_died_in(tmp_path):
    child = Child(tmp_path)
    journal = Path(child.ask("start")["journal"])
    child.ask("run t1")
    child.ask("record t1")
    child.ask("run t2")
    child.process.send_signal(signal.SIGKILL)
    child.process.wait(60)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive")
    assert dead.died_in == "t2" and dead.records == 1 and dead.started_at and dead.closed_at is None
    assert dead.session in journal.name and not journal.exists()
    assert dead.archived.parent == tmp_path / "archive" and dead.archived.name.startswith("results-")
    assert dead.archived.name.endswith("-unfinished.jsonl")
    recovered = load_journal(dead.archived)
    assert [r.test_id for r in recovered.records] == ["t1"] and recovered.meta["died_in"] == "t2"
    assert [p.name for p in tmp_path.iterdir()] == ["archive"]  # the lock file went with it


def _killed_after_two_records(report: Path) -> dict:
    """A child session that finished t1 and t2, then was killed with SIGKILL while running t3; its journal's header."""
    child = Child(report)
    journal = Path(child.ask("start")["journal"])
    for test_id in ("t1", "t2"):
        child.ask(f"run {test_id}")
        child.ask(f"record {test_id}")
    child.ask("run t3")
    child.process.send_signal(signal.SIGKILL)
    child.process.wait(60)
    return json.loads(journal.read_text().splitlines()[0])


def test_two_sessions_starting_at_once_bring_a_killed_sessions_records_into_the_history_once(tmp_path):
    header = _killed_after_two_records(tmp_path)
    history = tmp_path / "history"
    racers = [Child(tmp_path), Child(tmp_path)]
    try:
        for racer in racers:  # both recover before either answers: whichever order the kernel gives them
            racer.send(f"start {history}")
        archived = [racer.reply()["archived"] for racer in racers]
        for racer in racers:
            racer.ask("close")
            racer.finish()
    finally:
        for racer in racers:
            if racer.process.poll() is None:
                racer.process.kill()
    assert sorted(archived) == [[], [header["session"]]]  # one of them archived it, the other found it gone
    rows = read_history(history / "cpu-k.jsonl").rows
    assert [(r["session"], r["time"], r["test_id"], r["interrupted"]) for r in rows] == [
        (header["session"], header["started_at"], "t1", True), (header["session"], header["started_at"], "t2", True)]
    assert rows[0]["packages"] == ""  # the dead session's package list was never recorded: unknown, not this one's


def test_a_journal_recovered_again_after_a_crash_mid_recovery_appends_nothing_twice(tmp_path):
    header = _killed_after_two_records(tmp_path)
    (journal,) = journal_paths(tmp_path)
    kept = journal.read_bytes()
    store = HistoryStore(tmp_path / "history")
    (first,) = archive_dead_journals(tmp_path, tmp_path / "archive", store)
    assert (first.recovered.rows, first.recovered.appended, first.recovered.interrupted) == (2, 2, True)
    assert (first.recovered.session, first.recovered.started_at) == (header["session"], header["started_at"])
    journal.write_bytes(kept)  # as if the recovering session died after appending, before moving the journal
    (second,) = archive_dead_journals(tmp_path, tmp_path / "archive", store)
    assert (second.recovered.rows, second.recovered.appended) == (2, 0) and second.history_error is None
    assert [r["test_id"] for r in store.read("cpu-k").rows] == ["t1", "t2"]


def test_a_closed_journal_that_was_kept_reaches_the_history_unmarked(tmp_path):
    journal = Journal.start(tmp_path)  # a session that ended but could not write its results: it kept its journal
    journal.append(TestRecord("t1", throughput=1.0, samples=[1.0, 1.1], hardware_key="cpu-k"))
    journal.close(remove=False)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(tmp_path / "history"))
    assert dead.closed_at and not dead.recovered.interrupted and dead.recovered.appended == 1
    (row,) = HistoryStore(tmp_path / "history").read("cpu-k").rows
    assert "interrupted" not in row and row["session"] == journal.session


def test_a_history_that_cannot_be_written_leaves_the_journal_archived_with_the_reason(tmp_path):
    _killed_after_two_records(tmp_path)
    blocked = tmp_path / "history"
    blocked.write_text("a file where the history folder should be")
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(blocked))
    assert dead.recovered is None and str(blocked) in dead.history_error
    assert dead.archived.exists() and [r.test_id for r in load_journal(dead.archived).records] == ["t1", "t2"]


def test_the_dead_session_line_says_what_reached_the_history_and_how_to_append_it_later(tmp_path):
    from hwregress.plugin.collector import _dead_session_line

    _killed_after_two_records(tmp_path)
    (journal,) = journal_paths(tmp_path)
    kept = journal.read_bytes()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the history folder should be")
    (failed,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(blocked))
    assert _dead_session_line(failed).endswith(
        f"; not appended to the history {blocked}: {failed.history_error} (append them later: python -m hwregress "
        f"history append {failed.archived} --dir {blocked})")
    history = tmp_path / "history"
    for expected in ("; 2 rows appended to the history {}, marked interrupted",
                     "; its 2 rows were in the history {} already"):
        journal.write_bytes(kept)
        (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(history))
        assert _dead_session_line(dead).endswith(expected.format(history))
    journal.write_bytes(kept)
    (unrecorded,) = archive_dead_journals(tmp_path, tmp_path / "archive")  # --no-history: nothing said about it
    assert _dead_session_line(unrecorded).endswith("-o FILE.html)")


def test_a_legacy_shared_journal_is_archived(tmp_path):
    legacy = Journal(tmp_path / LEGACY_NAME)  # hwregress 0.1's collector: no header, no lock
    legacy.append(TestRecord("old", throughput=2.0))
    legacy.close(remove=False)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive")
    assert dead.records == 1 and dead.died_in is None and not (tmp_path / LEGACY_NAME).exists()


def test_load_skips_bad_lines_and_counts_them(tmp_path):
    path = tmp_path / "j.jsonl"
    lines = [json.dumps({"journal": 1, "session": "h-1-x", "pid": 1, "host": "h", "started_at": "2026-01-01T00:00:00"}),
             json.dumps({"running": "a"}), json.dumps(TestRecord("a", throughput=3.0).to_json()),
             "null", "[1, 2]", "{not json", json.dumps({"test_id": "b", "throughput": "fast"}),
             json.dumps({"test_id": "c", "verdict": "no-such-verdict"}), json.dumps({"test_id": 5}),
             json.dumps({"running": "b"}), '{"test_id": "torn", "thr']
    path.write_bytes(("\n".join(lines)).encode() + b"\n\xff\xfe\n")
    results = load_journal(path)
    assert [r.test_id for r in results.records] == ["a"] and results.records[0].throughput == 3.0
    assert results.meta["skipped_lines"] == 8
    assert results.meta["died_in"] == "b" and results.meta["session"] == "h-1-x" and results.meta["hostname"] == "h"


def test_unreadable_journal_is_one_error_naming_it(tmp_path):
    for path in (tmp_path / "missing.jsonl", tmp_path):
        with pytest.raises(JournalError, match=f"^{path}: cannot read the journal"):
            load_journal(path)


def test_record_problem_names_the_field():
    assert (record_problem({"test_id": "x", "samples": [1.0, "a"]})
            == "'samples' must be list[float], found [1.0, \"a\"]")
    assert record_problem(TestRecord("x").to_json()) is None


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=200),
                     st.lists(st.one_of(st.sampled_from(["null", "{}", '{"running": 1}', '{"test_id": "t"}',
                                                         '{"journal": 1, "session": 2}', '{"closed": null}']),
                                        st.text(max_size=30)), max_size=6).map(lambda ls: "\n".join(ls).encode())))
@example(raw=b"null\n")
@example(raw=b'{"test_id": "t", "samples": {"a": 1}}\n')
def test_any_bytes_as_a_journal_read_without_a_traceback(tmp_path, raw):
    path = tmp_path / "j.jsonl"
    path.write_bytes(raw)
    results = load_journal(path)
    assert isinstance(results, SessionResults) and path.read_bytes() == raw
    assert all(isinstance(r, TestRecord) and record_problem(vars(r)) is None for r in results.records)
    assert results.meta["skipped_lines"] <= raw.count(b"\n") + 1
