"""The controller's side: store every test's record as it arrives, show it in the terminal, and write the
session's outputs (``results.json``, the HTML report, the Markdown job summary) when the session ends.

Registered on the controller only, never on an xdist worker. It builds nothing: each record comes whole on
its report (:mod:`hwregress.plugin.record`). Every record is appended to this session's own journal as it
arrives, with the test that is running, so a session that dies before its end leaves what it finished and the
test it died in on disk; a later session archives only journals whose owner is gone, after appending their finished
records, marked interrupted, to the history their session used (:mod:`hwregress.store.recovery`).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from hwregress.hardware.devices import describe, environment_fingerprint, unavailable_reason
from hwregress.plugin import ci
from hwregress.plugin.fixture import SESSION_KEY
from hwregress.plugin.host_check import host_check, terminal_lines
from hwregress.plugin.provenance import machine_id, session_provenance
from hwregress.plugin.record import REPORT_ATTRIBUTE
from hwregress.plugin.settings import Settings
from hwregress.plugin.store_push import masked_store_args
from hwregress.store import result_files
from hwregress.store.atomic import atomic_write_json, atomic_write_text
from hwregress.store.history import HistoryStore
from hwregress.store.journal import Journal
from hwregress.store.printable import one_line
from hwregress.store.recovery import DeadSession, archive_dead_journals
from hwregress.store.results import SessionResults, TestRecord
from hwregress.store.verdicts import NOTEWORTHY


class Collector:
    """Gathers the records of a session and writes its outputs."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: dict[str, TestRecord] = {}
        self.paths: dict[str, Path] = {}
        self.problems: list[str] = []
        # a failed push to the store (queued) and a failed host check: said, never a lost result (the journal goes)
        self.store_failure: str | None = None
        self.host_check_failure: str | None = None
        self.host_checks: list[dict[str, Any]] = []  # this host against its fleets (meta.host_check)
        self.started = time.time()
        self.journal: Journal | None = None
        # the journal's session id once it starts: the history rows use it, also after a journal write failed, so a
        # kept journal recovered later is recognised as this session's rows
        # (with the start time: a container's hostname and pid can repeat, and the store keeps one session per name)
        self.session_id = f"{socket.gethostname()}-{os.getpid()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        self.dead: list[DeadSession] = []
        self.history: Any = None  # report.history_view.HistorySection once the session is in the history
        self.history_appended = False  # this session's rows are in its history folder

    # -- while the session runs --------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.settings.write_report:
            return
        report_dir = self.settings.report_dir
        history = HistoryStore(self.settings.history_dir) if self.settings.history_dir is not None else None
        try:
            self.dead = archive_dead_journals(report_dir, report_dir / "archive", history)
            self.journal = Journal.start(report_dir, history_dir=self.settings.history_dir)
            self.session_id = self.journal.session
        except OSError as error:
            self.problems.append(f"no journal of this session's records in {report_dir}: {error}")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.journal is not None:
            self._journal_write(self.journal.mark_running, nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = _record_of(report)
        if record is None:
            return
        self.records[record.test_id] = record
        if self.journal is not None:
            self._journal_write(self.journal.append, record)
        self.config.hook.pytest_hwregress_record_judged(config=self.config, record=record)

    def _journal_write(self, write: Any, value: Any) -> None:
        assert self.journal is not None
        try:
            write(value)
        except OSError as error:  # a full disk must not turn a finished measurement into a crash
            self.problems.append(f"journal {self.journal.path}: {error}; later records are kept in memory only")
            self.journal = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        """The verdict letter (``R`` regression, ``+`` improvement, ...) and, at ``-v``, the verdict word with
        its figure and ratio, as each test finishes."""
        record = _record_of(report)
        if record is None or not (report.when == "call" or (report.when == "setup" and report.skipped)):
            return None
        markup = {"red": True} if record.verdict in ci.BAD else {"yellow": True} if report.skipped else {"green": True}
        return report.outcome, ci.LETTERS[record.verdict], (ci.status_word(record, report.outcome), markup)

    # -- at the end -------------------------------------------------------------------------------
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        interrupted = int(exitstatus) == int(pytest.ExitCode.INTERRUPTED)
        if self.records and self.settings.history_dir is not None:
            self._append_history(session, self.settings.history_dir, interrupted)
        if self.records and (self.settings.history_dir is not None or self.settings.store_url):
            self._analyse_history(interrupted)
        if self.records and (self.settings.write_report or self.settings.store_url):
            self.host_checks = self._host_checks()
            # the session's status, not the hook's argument: a history not appended above has failed the session
            results = SessionResults(self._meta(int(session.exitstatus)), list(self.records.values()))
            if self.settings.write_report:
                self._write(results, session)
            if self.settings.store_url:
                self._push(results, session, self.settings.store_url)
        if self.journal is not None:
            self.journal.close(remove=not self.problems)  # the results file now holds everything it held

    def _append_history(self, session: pytest.Session, directory: Path, interrupted: bool) -> None:
        """Append this session's measured tests to the history folder (marked ``interrupted`` after a Ctrl-C)."""
        from filelock import Timeout

        store = HistoryStore(directory)
        try:
            appended = store.append_session(self.records.values(), self.session_id, _iso(self.started), interrupted,
                                            machine_id=machine_id())
        except (OSError, ValueError, Timeout) as error:
            self._fail(session, f"history not appended to {directory}: {error}; this session is missing from it "
                                "(fix the folder, or turn the history off with --no-history)")
            return
        self.paths.update({f"history ({key})": store.path_for(key) for key in appended})
        self.history_appended = True

    def _analyse_history(self, interrupted: bool) -> None:
        """The trends of this session's tests for the report and the alerts: this machine's history in the history
        folder and the fleet store (a session in both counted once), this session included."""
        from hwregress.judge.trends import load_trends
        from hwregress.plugin.store_push import store_history
        from hwregress.report.history_view import HistorySection
        from hwregress.store.database import masked
        from hwregress.store.history import session_history_rows

        directory, url = self.settings.history_dir, self.settings.store_url
        keys = {record.hardware_key for record in self.records.values() if record.hardware_key}
        more = session_history_rows(self.records.values(), self.session_id, _iso(self.started), interrupted)
        try:
            store_rows, store_problem = (store_history(url, keys, set(self.records), self._host_ids()) if url
                                         else ([], None))
            folders = [HistoryStore(directory)] if directory is not None else []
            trends, warnings = load_trends(folders, keys, list(self.records), more_rows=[*store_rows, *more])
        except (ValueError, ArithmeticError) as error:  # the rows are stored; only the analysis is lost
            self.problems.append(f"history of this session's tests not analysed: {error}; the report has no trends "
                                 "this time")
            return
        sources = [str(directory)] * bool(folders) + ([masked(url)] if url and store_problem is None else [])
        self.history = HistorySection(trends, [*([store_problem] if store_problem else []), *warnings], sources)

    def _host_ids(self) -> list[str]:
        """This machine's ids in the fleet store: the one its push files it under
        (:func:`hwregress.store.session_rows.host_id`: its GPUs' UUIDs where it tests GPUs), its machine id (its
        sessions without a GPU) and its bare hostname (older sessions', which :mod:`hwregress.store.host_identity`
        joins to it at its next push)."""
        from hwregress.store.session_rows import host_id

        machine, hostname = machine_id(), socket.gethostname()
        pushed = host_id(list(self.records.values()), {"machine_id": machine, "hostname": hostname})
        return [name for name in (pushed, machine, hostname) if name]

    def _write(self, results: SessionResults, session: pytest.Session) -> None:
        """results.json first, by the store, then the page that reads it: a page that cannot be rendered costs
        only the page."""
        report_dir = self.settings.report_dir
        try:
            written = result_files.write_results(results, report_dir)
            self.paths.update(written.paths)
            stem = written.stem
        except (OSError, ValueError, TypeError) as error:  # full disk, unwritable folder, a value JSON refuses
            kept = f"they stay in {self.journal.path}" if self.journal is not None else "no journal holds them either"
            self._fail(session, f"results not written to {report_dir}: {error}; {kept}")
            stem = result_files.session_stem(results.meta, report_dir / result_files.ARCHIVE_FOLDER)
        self._write_report(results, session, stem)
        self._write_summaries(results, session)

    def _write_report(self, results: SessionResults, session: pytest.Session, stem: str) -> None:
        from hwregress import report  # Jinja2 only when there is something to render

        try:
            self.paths.update(report.write_report(results, self.settings.report_dir, stem, self.history))
        except Exception as error:  # a template or a value the page cannot show: the results are written already
            where = self.paths.get("results") or (self.journal.path if self.journal is not None else None)
            self._fail(session, f"report not written to {self.settings.report_dir}: {type(error).__name__}: "
                                f"{error}; the results are {f'in {where}' if where else 'not on disk either'}")

    def _write_summaries(self, results: SessionResults, session: pytest.Session) -> None:
        summary = ci.markdown_summary(results)
        targets = [Path(p) for p in (os.environ.get("GITHUB_STEP_SUMMARY"), self.settings.summary_md) if p]
        for target in targets:
            try:
                _write_summary(target, summary, append=str(target) == os.environ.get("GITHUB_STEP_SUMMARY"))
                self.paths.setdefault("summary", target)
            except OSError as error:
                self._fail(session, f"Markdown summary not written to {target}: {error}")

    def _host_checks(self) -> list[dict[str, Any]]:
        """This host against its fleets; a defect there is one line, never the session's results."""
        try:
            return host_check(self.config.stash[SESSION_KEY].fleet, self.records.values())
        except Exception as error:  # the results come first: whatever the check hit, they are written
            self.host_check_failure = f"host check against the fleet not done: {type(error).__name__}: {error}"
            return []

    def _push(self, results: SessionResults, session: pytest.Session, url: str) -> None:
        """Push the session to the fleet store (after results.json: a failed push queues it and says so)."""
        from hwregress.plugin.store_push import push_session

        pushed = push_session(results.to_json(), url, self.settings.report_dir)
        if not pushed.failed:
            self.paths["store"] = pushed.line.removeprefix("store: ")
            return
        self.store_failure = pushed.line  # not a problem of the results: results.json holds them, the journal goes
        if self.settings.require_store:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self._rewrite_exitstatus(results, int(session.exitstatus))

    def _rewrite_exitstatus(self, results: SessionResults, exitstatus: int) -> None:
        """results.json and its archive copy, written before the push, say the exit status a failed required push
        gave the session, and why (``meta.store_push``); the queued copy keeps the tests' own status."""
        results.meta.update(exitstatus=exitstatus, store_push="failed")
        for key in ("results", "results archive"):
            if key in self.paths:
                try:
                    atomic_write_json(self.paths[key], results.to_json())
                except (OSError, ValueError) as error:  # the first write holds the records; only the status is stale
                    self.problems.append(f"{self.paths[key]}: exit status {exitstatus} not recorded: {error}")

    def _fail(self, session: pytest.Session, problem: str) -> None:
        self.problems.append(problem)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records and not self.problems and not self.dead and self.store_failure is None:
            return
        write = terminalreporter.write_line
        terminalreporter.section("hwregress")
        results = SessionResults({}, list(self.records.values()))
        write(", ".join(f"{count} {verdict}" for verdict, count in results.counts().items()))
        for record in sorted(self.records.values(), key=lambda r: (r.verdict.rank, r.test_id)):
            if record.verdict in NOTEWORTHY:
                why = record.message.replace(f"{record.test_id}: ", "")[:300]
                write(f"  {record.verdict:<14} {record.test_id}: {ci.figure(record)}  {why}")
                for sentence in record.diagnosis[:2]:
                    write(f"  {'':<14} likely cause: {sentence}")
        for line in self._history_lines():
            write(line)
        for name, path in self.paths.items():
            write(f"{name}: {path}")
        for line in terminal_lines(self.host_checks):
            write(f"hwregress: {line}", red=True)
        if self.host_check_failure is not None:
            write(f"hwregress: {self.host_check_failure}", yellow=True)
        if self.store_failure is not None:
            required = " (--require-store: the session fails)" if self.settings.require_store else ""
            write(f"hwregress: {self.store_failure}{required}", red=bool(required), yellow=not required)
        for problem in self.problems:
            write(f"hwregress: {problem}", red=True)
        for dead in self.dead:
            write(_dead_session_line(dead))
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for line in ci.github_annotations(self.records.values()):
                write(line)

    def _history_lines(self) -> list[str]:
        """The tests whose history moved (regression, drift, improvement) and the history lines skipped."""
        if self.history is None:
            return []
        lines = [f"  history {trend.status:<10} {trend.test_id}: {trend.summary}"[:400]
                 for trend in self.history.trends if trend.status in ci.MOVED]
        return lines + [f"hwregress: warning: {warning}" for warning in self.history.warnings[:20]]

    def _meta(self, exitstatus: int) -> dict[str, Any]:
        meta = self._own_meta(exitstatus)
        self.config.hook.pytest_hwregress_session_meta(config=self.config, meta=meta)
        return meta

    def _own_meta(self, exitstatus: int) -> dict[str, Any]:
        return {
            "hostname": socket.gethostname(),
            "session": self.session_id,
            "started_at": _iso(self.started),
            "finished_at": _iso(time.time()),
            "duration_s": time.time() - self.started,
            "exitstatus": exitstatus,
            "interrupted": exitstatus == int(pytest.ExitCode.INTERRUPTED),
            "args": masked_store_args(list(self.config.invocation_params.args)),
            "workers": getattr(self.config.option, "numprocesses", None) or 0,
            "tier": self.settings.selection.tier,
            "visits": "auto" if self.settings.visits is None else self.settings.visits,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "hardware": [_hardware(device) for device in self.settings.selection.devices],
            "baseline_dir": str(self.settings.baseline_dir),
            "update_mode": self.settings.policy.update_mode,
            "tolerances": vars(self.settings.policy.tolerances),
            "pid": os.getpid(),
            "provenance": session_provenance(Path(str(self.config.rootpath)), os.environ),
            "machine_id": machine_id(),
            **({"host_check": self.host_checks} if self.host_checks else {}),
            **({"history": self._history_meta()} if self.history is not None else {}),
            **({"ab": self.settings.ab.meta()} if self.settings.ab is not None else {}),
        }

    def _history_meta(self) -> dict[str, Any]:
        folder = {"dir": str(self.settings.history_dir)} if self.history_appended else {}
        return {**folder, "sources": self.history.sources, "warnings": self.history.warnings[:20],
                "trends": [{"test_id": t.test_id, "hardware_key": t.hardware_key, "status": t.status,
                            "summary": t.summary,
                            "sessions": len(t.rows), "change_points": len(t.changes)} for t in self.history.trends]}


_PARSED = "_hwregress_parsed_record"


def _record_of(report: pytest.TestReport) -> TestRecord | None:
    """The record a report carries, parsed once per report (the status line and the store both read it)."""
    if _PARSED not in report.__dict__:
        data = getattr(report, REPORT_ATTRIBUTE, None)
        report.__dict__[_PARSED] = None if data is None else TestRecord.from_json(data)
    return report.__dict__[_PARSED]


def _dead_session_line(dead: DeadSession) -> str:
    """One sentence about a session that ended without writing its results, and whether its records reached the
    history."""
    how = f"died while running {one_line(dead.died_in)}" if dead.died_in else "ended without writing its results"
    return (f"an earlier session ({one_line(dead.session)}, started {one_line(dead.started_at)}) {how}; its "
            f"{dead.records} finished records are in {dead.archived} (render them: python -m hwregress report render "
            f"{dead.archived} -o FILE.html){_recovered_clause(dead)}")


def _recovered_clause(dead: DeadSession) -> str:
    if dead.history_error is not None:
        return (f"; not appended to the history {dead.history}: {dead.history_error} (append them later: "
                f"python -m hwregress history append {dead.archived} --dir {dead.history})")
    recovered = dead.recovered
    if recovered is None or recovered.rows == 0:
        return ""
    assumed = (" (its journal, from an older hwregress, does not say which history its session used: this "
               "session's)") if dead.history_assumed else ""
    if recovered.appended == 0:
        return f"; its {recovered.rows} rows were in the history {dead.history} already{assumed}"
    marked = ", marked interrupted" if recovered.interrupted else ""
    return f"; {recovered.appended} rows appended to the history {dead.history}{marked}{assumed}"


def _write_summary(path: Path, text: str, append: bool) -> None:
    """Append to the CI runner's summary file; replace ``--summary-md`` atomically, so a FIFO or a device there
    is refused (:func:`hwregress.store.atomic.atomic_write_text`) instead of blocking or being replaced.

    Raises:
        OSError: the file cannot be written, or is not a regular file (``NotARegularFileError``).
    """
    if not append:
        atomic_write_text(path, text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as stream:
        stream.write(text)


def _hardware(device: str) -> dict[str, Any]:
    reason = unavailable_reason(device)
    if reason is not None:
        return {"device": device, "unavailable": reason}
    info = describe(device)
    return {"device": device, "name": info.name, "hardware_key": info.hardware_key,
            "total_memory_bytes": info.total_memory_bytes, "facts": info.facts,
            "environment": environment_fingerprint(device)}


def _iso(timestamp: float) -> str:
    return _dt.datetime.fromtimestamp(timestamp, _dt.timezone.utc).isoformat(timespec="seconds")
