"""The per-session journal: its own file and lock per session, only dead sessions archived, the test a
killed session died in, and any bytes read back without a traceback."""

from __future__ import annotations

import datetime as _dt
import json
import re
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import pytest
from filelock import FileLock, Timeout
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hwregress import __version__
from hwregress.store.history import HistoryStore, read_history
from hwregress.store.journal import LEGACY_NAME, Journal, JournalError, journal_paths, load_journal
from hwregress.store.recovery import archive_dead_journals
from hwregress.store.results import SessionResults, TestRecord, record_problem

# A child session driven line by line over stdin/stdout: no sleeps, no timing assumptions.
CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from hwregress.store.history import HistoryStore
    from hwregress.store.journal import Journal
    from hwregress.store.recovery import archive_dead_journals
    from hwregress.store.results import TestRecord
    report = Path(sys.argv[1])
    journal = None
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "start":  # start [HISTORY_DIR]: this session's history (none: --no-history), named in its journal
            history = HistoryStore(argument) if argument else None
            dead = archive_dead_journals(report, report / "archive", history)
            journal = Journal.start(report, history_dir=history.directory if history else None)
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
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

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


def test_start_writes_a_header_and_holds_a_lock(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    journal = Journal.start(tmp_path, history_dir=Path("reports/history"))
    assert journal.path.name == f".results.{journal.session}.partial.jsonl"
    header = json.loads(journal.path.read_text().splitlines()[0])
    assert header["journal"] == 1 and header["session"] == journal.session and isinstance(header["pid"], int)
    assert {"host", "started_at"} <= set(header) and header["hwregress_version"] == __version__
    assert header["history"] == str(tmp_path / "reports" / "history")  # absolute: the next session may run elsewhere
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


def _killed_after_two_records(report: Path, history: Path | None) -> dict:
    """A child session with ``history`` (None: --no-history) that finished t1 and t2, then was killed with SIGKILL while
    running t3; its journal's header."""
    child = Child(report)
    journal = Path(child.ask(f"start {history}" if history else "start")["journal"])
    for test_id in ("t1", "t2"):
        child.ask(f"run {test_id}")
        child.ask(f"record {test_id}")
    child.ask("run t3")
    child.process.send_signal(signal.SIGKILL)
    child.process.wait(60)
    return json.loads(journal.read_text().splitlines()[0])


def test_two_sessions_starting_at_once_bring_a_killed_sessions_records_into_the_history_once(tmp_path):
    history = tmp_path / "history"
    header = _killed_after_two_records(tmp_path, history)
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
    history = tmp_path / "history"
    header = _killed_after_two_records(tmp_path, history)
    (journal,) = journal_paths(tmp_path)
    archive = tmp_path / "archive"
    archive.write_text("a file where the archive folder should be")  # the move fails after the append
    recovering = Child(tmp_path)
    recovering.send(f"start {history}")
    assert recovering.process.wait(60) != 0  # it died after appending, before moving the journal
    assert "FileExistsError" in recovering.process.stderr.read()
    assert journal.exists() and [r["test_id"] for r in read_history(history / "cpu-k.jsonl").rows] == ["t1", "t2"]

    archive.unlink()
    (second,) = archive_dead_journals(tmp_path, archive, HistoryStore(history))
    assert (second.recovered.rows, second.recovered.appended) == (2, 0) and second.history_error is None
    assert (second.recovered.session, second.recovered.started_at) == (header["session"], header["started_at"])
    assert [r["test_id"] for r in read_history(history / "cpu-k.jsonl").rows] == ["t1", "t2"]  # not twice
    assert not journal.exists() and second.archived.exists()


def test_a_closed_journal_that_was_kept_reaches_the_history_unmarked(tmp_path):
    # a session that ended but could not write its results: it kept its journal
    journal = Journal.start(tmp_path, history_dir=tmp_path / "history")
    journal.append(TestRecord("t1", throughput=1.0, samples=[1.0, 1.1], hardware_key="cpu-k"))
    journal.close(remove=False)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(tmp_path / "history"))
    assert dead.closed_at and not dead.recovered.interrupted and dead.recovered.appended == 1
    (row,) = HistoryStore(tmp_path / "history").read("cpu-k").rows
    assert "interrupted" not in row and row["session"] == journal.session


def test_a_history_that_cannot_be_written_leaves_the_journal_archived_with_the_reason(tmp_path):
    blocked = tmp_path / "history"
    _killed_after_two_records(tmp_path, blocked)
    blocked.write_text("a file where the history folder should be")
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(blocked))
    assert dead.recovered is None and str(blocked) in dead.history_error
    assert dead.archived.exists() and [r.test_id for r in load_journal(dead.archived).records] == ["t1", "t2"]


def test_the_dead_session_line_says_what_reached_the_history_and_how_to_append_it_later(tmp_path):
    from hwregress.plugin.collector import _dead_session_line

    history = tmp_path / "history"
    _killed_after_two_records(tmp_path, history)
    (journal,) = journal_paths(tmp_path)
    kept = journal.read_bytes()
    history.write_text("a file where the history folder should be")
    (failed,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(tmp_path / "current"))
    assert _dead_session_line(failed).endswith(
        f"; not appended to the history {history}: {failed.history_error} (append them later: python -m hwregress "
        f"history append {failed.archived} --dir {history})")
    history.unlink()
    for expected in ("; 2 rows appended to the history {}, marked interrupted",
                     "; its 2 rows were in the history {} already"):
        journal.write_bytes(kept)
        (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(tmp_path / "current"))
        assert _dead_session_line(dead).endswith(expected.format(history))
    assert not (tmp_path / "current").exists()


def _journal_file(report: Path, header: dict | None, *test_ids: str) -> Path:
    """A journal left by a session that is gone (no lock held): ``header`` (None: hwregress 0.1's, without one), then
    one record per test id (samples/s on hardware key cpu-k)."""
    lines = [header] if header is not None else []
    lines += [TestRecord(t, throughput=1.0, samples=[1.0, 1.1, 0.9], hardware_key="cpu-k").to_json() for t in test_ids]
    path = report / (f".results.{header['session']}.partial.jsonl" if header else LEGACY_NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _header(**fields) -> dict:
    return {"journal": 1, "session": "h-7-20260301T020000Z", "pid": 7, "host": "h",
            "started_at": "2026-03-01T02:00:00+00:00", **fields}


def test_recovered_rows_carry_the_version_of_the_hwregress_that_wrote_the_journal(tmp_path):
    history = tmp_path / "history"
    _journal_file(tmp_path, _header(hwregress_version="0.0.7", history=str(history)), "t1")
    archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(history))
    _journal_file(tmp_path, _header(session="h-8-20260302T020000Z", history=str(history)), "t1")  # no version said
    archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(history))
    rows = read_history(history / "cpu-k.jsonl").rows
    assert [(r["session"], r.get("hwregress_version")) for r in rows] == [("h-7-20260301T020000Z", "0.0.7"),
                                                                          ("h-8-20260302T020000Z", None)]
    assert "hwregress_version" not in rows[1]  # unknown: left out, not this hwregress's version


def test_a_dead_sessions_records_go_to_the_history_its_journal_names(tmp_path):
    own, current = tmp_path / "nightly" / "history", tmp_path / "history"
    _killed_after_two_records(tmp_path, own)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(current))
    assert dead.history == own and dead.recovered.appended == 2 and not dead.history_assumed
    assert [r["test_id"] for r in read_history(own / "cpu-k.jsonl").rows] == ["t1", "t2"]
    assert not current.exists()  # the session that recovered it wrote nothing into its own history


def test_a_dead_no_history_sessions_records_reach_no_history(tmp_path):
    from hwregress.plugin.collector import _dead_session_line

    _killed_after_two_records(tmp_path, None)
    current = tmp_path / "history"
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(current))
    assert (dead.history, dead.recovered, dead.history_error, dead.records) == (None, None, None, 2)
    assert not current.exists() and _dead_session_line(dead).endswith("-o FILE.html)")


def test_a_dead_sessions_history_folder_that_is_gone_is_created_as_the_session_would_have(tmp_path):
    gone = tmp_path / "moved-away" / "history"
    _killed_after_two_records(tmp_path, gone)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", None)  # this session runs with --no-history
    assert dead.history == gone and dead.recovered.appended == 2
    assert [r["test_id"] for r in read_history(gone / "cpu-k.jsonl").rows] == ["t1", "t2"]


@pytest.mark.parametrize("header", [_header(), None], ids=["header-without-history", "no-header"])
def test_an_older_journal_that_names_no_history_goes_to_this_sessions_and_the_line_says_so(tmp_path, header):
    from hwregress.plugin.collector import _dead_session_line

    current = tmp_path / "history"
    _journal_file(tmp_path, header, "t1", "t2")
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(current))
    assert dead.history == current and dead.history_assumed and dead.recovered.appended == 2
    assert _dead_session_line(dead).endswith(
        f"; 2 rows appended to the history {current}, marked interrupted (its journal, from an older hwregress, does "
        "not say which history its session used: this session's)")
    _journal_file(tmp_path, header, "t3")
    (unrecorded,) = archive_dead_journals(tmp_path, tmp_path / "archive")  # this session runs with --no-history
    assert (unrecorded.history, unrecorded.recovered) == (None, None)
    assert len(read_history(current / "cpu-k.jsonl").rows) == 2


def test_a_journal_without_header_is_named_alike_in_the_line_the_archive_and_the_history(tmp_path):
    from hwregress.plugin.collector import _dead_session_line

    current = tmp_path / "history"
    path = _journal_file(tmp_path, None, "t1")
    mtime = _dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc)
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(current))
    (row,) = read_history(current / "cpu-k.jsonl").rows
    assert re.fullmatch(r"journal-[0-9a-f]{16}", dead.session) and row["session"] == dead.session
    assert row["time"] == dead.started_at == mtime.isoformat(timespec="seconds")
    assert f"an earlier session ({dead.session}, started {dead.started_at})" in _dead_session_line(dead)
    assert dead.archived.name == f"results-{mtime:%Y%m%d-%H%M%S}-{dead.session}-unfinished.jsonl"


def test_an_unreadable_journal_is_archived_without_a_word_about_the_history(tmp_path):
    from hwregress.plugin.collector import _dead_session_line

    unreadable = tmp_path / ".results.h-9-20260301T020000Z.partial.jsonl"
    unreadable.symlink_to("/proc/self/mem")  # a regular file whose every read fails (EIO), even for root
    current = tmp_path / "history"
    (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(current))
    assert (dead.records, dead.recovered, dead.history_error) == (0, None, None)
    assert "history" not in _dead_session_line(dead) and not current.exists()
    assert dead.archived.is_symlink() and not unreadable.is_symlink()


def test_recovering_a_journal_streams_the_history_instead_of_holding_it(tmp_path):
    history = tmp_path / "history"
    padding = "p" * 1500  # a real row is about 1.7 KB
    rows = [{"v": 1, "session": f"s{i}", "time": "2026-01-01T00:00:00+00:00", "test_id": "t1", "hardware_key": "cpu-k",
             "median": 1.0, "x_padding": padding} for i in range(5000)]
    HistoryStore(history).append("cpu-k", rows)
    size = (history / "cpu-k.jsonl").stat().st_size
    _journal_file(tmp_path, _header(history=str(history)), "t1")
    tracemalloc.start()
    try:
        (dead,) = archive_dead_journals(tmp_path, tmp_path / "archive", HistoryStore(history))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert dead.recovered.appended == 1
    assert peak < size / 16, f"recovering one row into a history of {size} bytes peaked at {peak} bytes"


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


def test_an_earlier_sessions_name_with_a_control_character_is_escaped_in_its_line(tmp_path):
    # a hand-edited journal's session name went into the terminal raw: a newline broke the warning in two
    from hwregress.plugin.collector import _dead_session_line
    from hwregress.store.recovery import DeadSession

    dead = DeadSession("host-1\nforged", "2026-03-16T02:00:00\x1b[2J", "t\r1", 2, tmp_path / "archived.jsonl")
    line = _dead_session_line(dead)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line, line
    assert line.startswith("an earlier session ('host-1\\nforged', started '2026-03-16T02:00:00\\x1b[2J') died "
                           "while running 't\\r1'; its 2 finished records"), line
