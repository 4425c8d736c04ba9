"""The session journal: every finished record appended (fsynced) to a JSON-lines file while the session
runs, so a session that dies hard (segfault, OOM killer, SIGKILL, power loss) still leaves its finished
results and the name of the test it died in.

Each session writes its own ``.results.<session-id>.partial.jsonl`` in the report folder and holds an
exclusive lock (``filelock``, ``flock(2)`` on POSIX) on ``.results.<session-id>.lock`` for its whole life.
The kernel drops the lock when the process dies however it dies, so a journal whose lock can be taken
belongs to a session that is gone: :func:`archive_dead_journals` moves only those to the archive, after appending
their finished records to the session history (:func:`append_to_history`) while it holds their lock. Sessions
sharing a report folder therefore never touch each other's journals, and of two sessions starting at once only one
recovers a dead journal; a recovering session that dies between the append and the move leaves the journal to the
next one, whose append finds the rows there already (a journal's rows reach the history once).

Lines, in order::

    {"journal": 1, "session": "host-1234-20260101T120000Z", "pid": 1234, "host": "host", "started_at": "..."}
    {"running": "bench_tests/test_x.py::test_y[...]"}      before each test starts
    {...TestRecord.to_json()...}                            as each test finishes (the last one per id wins)
    {"closed": "..."}                                       when the session closed without removing it
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from hwregress.store.atomic import read_regular_file
from hwregress.store.figures import migrate_legacy_details
from hwregress.store.history import HistoryStore, parse_time, row_from_record
from hwregress.store.results import SessionResults, TestRecord, record_problem

JOURNAL_FORMAT = 1
LEGACY_NAME = ".results.partial.jsonl"  # the single shared journal of hwregress <= 0.1
_PREFIX, _SUFFIX, _LOCK_SUFFIX = ".results.", ".partial.jsonl", ".lock"


class JournalError(ValueError):
    """A journal that cannot be read at all (missing, a folder, no permission); the message names it."""


@dataclass
class Recovered:
    """A journal's finished records brought into the session history by :func:`append_to_history`.

    Attributes:
        session: the rows' session id: the journal's (``host-pid-start``), or ``journal-<hash>`` of a journal
            without header (hwregress 0.1's), the first 16 hex digits of the SHA-256 of its bytes.
        started_at: the rows' time: the session's start (UTC ISO 8601), or the file's modification time.
        interrupted: the session died before its end (its journal was never closed): the rows are marked so.
        rows: the journal's measured records, one history row each.
        appended: rows appended now; the others were in the history already.
    """

    session: str
    started_at: str
    interrupted: bool
    rows: int
    appended: int


@dataclass
class DeadSession:
    """A journal left by a session that ended without removing it, as :func:`archive_dead_journals` found it.

    Attributes:
        session: the session id (``host-pid-start``; the file name for a journal without header).
        started_at: ISO 8601 UTC start time, None when the journal has no header.
        died_in: the test that was running when the session died, None when none was.
        records: number of finished records the journal holds.
        archived: where the journal now lies.
        closed_at: set when the session closed normally but kept its journal (its results were not written).
        history: the history folder its records were appended to (None when no history was given).
        recovered: what reached that history (None when no history was given or the append failed).
        history_error: why the append failed (the journal is archived all the same: ``history append`` it later).
    """

    session: str
    started_at: str | None
    died_in: str | None
    records: int
    archived: Path
    closed_at: str | None = None
    history: Path | None = None
    recovered: Recovered | None = None
    history_error: str | None = None


@dataclass
class Journal:
    """An append-only JSON-lines file of one session, flushed and fsynced per line.

    Build it with :meth:`start`; ``Journal(path)`` alone opens (appends to) ``path`` without header or
    lock, as hwregress 0.1 did.
    """

    path: Path
    session: str = ""
    lock_path: Path | None = None
    _lock: FileLock | None = field(default=None, repr=False)
    _stream: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self._stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = self.path.open("a", encoding="utf-8")

    @classmethod
    def start(cls, report_dir: Path, now: _dt.datetime | None = None) -> Journal:
        """Begin this process's journal under ``report_dir``: take its lock, create the file, write the header.

        The lock is taken before the journal exists, so no other session can see the journal unlocked.

        Raises:
            OSError: the folder cannot be created or written.
        """
        now = now or _dt.datetime.now(_dt.timezone.utc)
        host, pid = socket.gethostname(), os.getpid()
        report_dir = Path(report_dir)
        report_dir.mkdir(parents=True, exist_ok=True)
        base = f"{_safe(host)}-{pid}-{now.strftime('%Y%m%dT%H%M%SZ')}"
        for attempt in range(100):
            session = base if attempt == 0 else f"{base}-{attempt}"
            lock_path = report_dir / f"{_PREFIX}{session}{_LOCK_SUFFIX}"
            lock = FileLock(str(lock_path), timeout=0)
            try:
                lock.acquire()
            except Timeout:
                continue
            path = report_dir / f"{_PREFIX}{session}{_SUFFIX}"
            try:
                stream = _create_exclusive(path)
            except BaseException:
                lock.release()
                if path.exists():
                    continue
                raise
            journal = cls(path, session, lock_path, lock, stream)
            journal._write({"journal": JOURNAL_FORMAT, "session": session, "pid": pid, "host": host,
                            "started_at": now.isoformat(timespec="seconds")})
            return journal
        raise FileExistsError(f"{report_dir}: no free journal name for session {base}")

    def mark_running(self, test_id: str) -> None:
        """Note that ``test_id`` starts, so a session killed during it names the test it died in."""
        self._write({"running": test_id})

    def append(self, record: TestRecord | Mapping[str, Any]) -> None:
        """Append one finished record (its last line per test id wins on reading)."""
        self._write(record.to_json() if isinstance(record, TestRecord) else dict(record))

    def close(self, remove: bool) -> None:
        """Close the journal, delete it when ``remove`` (the results file now holds everything), and drop
        the lock: a kept journal is then archived by the next session."""
        if self._stream is not None and not self._stream.closed:
            if not remove:
                self._write({"closed": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
            self._stream.close()
        if remove:
            self.path.unlink(missing_ok=True)
        if self._lock is not None and self.lock_path is not None:
            self.lock_path.unlink(missing_ok=True)  # while still held: no one can lock this name meanwhile
            self._lock.release()
            self._lock = None

    def _write(self, data: Mapping[str, Any]) -> None:
        self._stream.write(json.dumps(data, default=str) + "\n")
        self._stream.flush()
        os.fsync(self._stream.fileno())


def _create_exclusive(path: Path) -> Any:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o666)
    return os.fdopen(descriptor, "a", encoding="utf-8")


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "_" for c in text)[:60] or "host"


def journal_paths(report_dir: Path) -> list[Path]:
    """Every journal file in ``report_dir`` (this version's and the legacy shared name), sorted."""
    found = [*Path(report_dir).glob(f"{_PREFIX}*{_SUFFIX}"), Path(report_dir) / LEGACY_NAME]
    return sorted(p for p in found if p.is_file())


def _lock_path_of(journal: Path) -> Path:
    if journal.name == LEGACY_NAME:
        return journal.with_name(LEGACY_NAME + _LOCK_SUFFIX)
    return journal.with_name(journal.name[: -len(_SUFFIX)] + _LOCK_SUFFIX)


def archive_dead_journals(report_dir: Path, archive_dir: Path,
                          history: HistoryStore | None = None) -> list[DeadSession]:
    """Move every journal of ``report_dir`` whose session is gone (its lock can be taken) into
    ``archive_dir`` as ``results-<start>-<session>-unfinished.jsonl``, first appending its finished records to
    ``history`` (:func:`append_to_history`; a history that cannot be written is said in
    :attr:`DeadSession.history_error` and the journal is archived all the same); journals of live sessions are not
    touched. Returns what was archived, oldest first.

    Raises:
        OSError: the archive folder cannot be created or a journal cannot be moved.
    """
    dead = []
    for journal in journal_paths(report_dir):
        lock_path = _lock_path_of(journal)
        lock = FileLock(str(lock_path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue  # a live session's
        try:
            if journal.exists():
                dead.append(_archive(journal, Path(archive_dir), history))
            lock_path.unlink(missing_ok=True)
        finally:
            lock.release()
    return sorted(dead, key=lambda d: (d.started_at or "", d.session))


def _archive(journal: Path, archive_dir: Path, history: HistoryStore | None) -> DeadSession:
    try:
        results = load_journal(journal)
    except JournalError:
        results = SessionResults({}, [])
    recovered, history_error = None, None
    if history is not None:
        try:
            recovered = append_to_history(journal, results, history)
        except (OSError, ValueError, Timeout) as error:
            history_error = str(error)
    meta = results.meta
    session = str(meta.get("session") or journal.name)
    started = meta.get("started_at") if isinstance(meta.get("started_at"), str) else None
    stamp = _stamp(started, journal)
    archive_dir.mkdir(parents=True, exist_ok=True)
    target, index = archive_dir / f"results-{stamp}-{_safe(session)}-unfinished.jsonl", 0
    while target.exists():
        index += 1
        target = archive_dir / f"results-{stamp}-{_safe(session)}-{index}-unfinished.jsonl"
    journal.replace(target)
    return DeadSession(session, started, meta.get("died_in"), len(results.records), target, meta.get("closed_at"),
                       history.directory if history is not None else None, recovered, history_error)


def append_to_history(path: Path, results: SessionResults, history: HistoryStore) -> Recovered:
    """Append the finished records of the journal at ``path`` (as :func:`load_journal` read it into ``results``) to
    ``history``, with the session id and start time of the session that wrote them (:func:`journal_identity`),
    marked interrupted unless the session closed its journal; rows the history holds already (the same session id
    and test id) are not appended again (:meth:`HistoryStore.append_session` with ``recovered``).

    Raises:
        OSError: the journal (to name one without header) or the history cannot be read or written.
        ValueError: a row JSON cannot hold, or the history folder cannot hold its hardware key.
        filelock.Timeout: another writer held a history file's lock too long.
    """
    session, started = journal_identity(path, results)
    interrupted = results.meta.get("closed_at") is None
    appended = history.append_session(results.records, session, started, interrupted=interrupted, recovered=True)
    rows = sum(row_from_record(record, session, started, "") is not None for record in results.records)
    return Recovered(session, started, interrupted, rows, sum(appended.values()))


def journal_identity(path: Path, results: SessionResults) -> tuple[str, str]:
    """The session id and start time (UTC ISO 8601) of the journal at ``path`` (read into ``results``): its header's;
    for a journal without header (hwregress 0.1), ``journal-`` and the first 16 hex digits of the SHA-256 of its
    bytes, and the file's modification time (both survive the move to the archive, so the same file always gets the
    same identity).

    Raises:
        OSError: a journal without header cannot be read.
    """
    session, started = results.meta.get("session"), results.meta.get("started_at")
    if not isinstance(session, str) or not session:
        session = f"journal-{hashlib.sha256(read_regular_file(path)).hexdigest()[:16]}"
    moment = parse_time(started) if isinstance(started, str) else None
    if moment is None:
        moment = _dt.datetime.fromtimestamp(Path(path).stat().st_mtime, _dt.timezone.utc)
        return session, moment.isoformat(timespec="seconds")
    return session, started


def _stamp(started: str | None, journal: Path) -> str:
    try:
        moment = _dt.datetime.fromisoformat(started) if started else None
    except ValueError:
        moment = None
    if moment is None:
        moment = _dt.datetime.fromtimestamp(journal.stat().st_mtime, _dt.timezone.utc)
    return moment.strftime("%Y%m%d-%H%M%S")


# -- reading -----------------------------------------------------------------------------------------------
def load_journal(path: str | Path) -> SessionResults:
    """The records of a journal, read line by line; the last record per test id wins.

    Lines that cannot be used (not JSON, not an object, a record whose fields have the wrong types, a
    torn last line, bytes that are not UTF-8) are skipped and counted in ``meta["skipped_lines"]``. The
    header's session, pid, host and start go to ``meta``; ``meta["died_in"]`` names the last test marked
    running that has no record (``meta["unfinished"]`` lists every such test, in start order).

    Raises:
        JournalError: the file cannot be read at all (missing, a folder or device, no permission).
    """
    try:
        raw = read_regular_file(path)
    except OSError as error:
        raise JournalError(f"{path}: cannot read the journal: {error.strerror or error}") from None
    meta: dict[str, Any] = {"hostname": "unknown", "interrupted": True, "journal": str(path), "skipped_lines": 0}
    records: dict[str, TestRecord] = {}
    running: list[str] = []
    for line in raw.split(b"\n"):
        if line.strip():
            _read_line(line, meta, records, running)
    if running:
        meta["died_in"], meta["unfinished"] = running[-1], running
    return SessionResults(meta, list(records.values()))


def _read_line(line: bytes, meta: dict[str, Any], records: dict[str, TestRecord], running: list[str]) -> None:
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and data.get("journal") == JOURNAL_FORMAT and isinstance(data.get("session"), str):
        meta.update(session=data["session"], pid=data.get("pid"), started_at=data.get("started_at"))
        meta["hostname"] = str(data.get("host") or "unknown")
    elif isinstance(data, dict) and set(data) == {"running"} and isinstance(data["running"], str):
        running.append(data["running"])
    elif isinstance(data, dict) and set(data) == {"closed"} and isinstance(data["closed"], str):
        meta["closed_at"] = data["closed"]
    elif (record := record_from_json(data)) is not None:
        records[record.test_id] = record
        if record.test_id in running:
            running.remove(record.test_id)
    else:
        meta["skipped_lines"] += 1


def record_from_json(data: Any) -> TestRecord | None:
    """A :class:`TestRecord` from one parsed JSON value, None when it is not an object with a text
    ``test_id`` whose known fields all have the types the record declares (see :func:`record_problem`). A journal
    line carries no schema version: family figures an older hwregress kept in ``details`` are moved to the
    sub-records (:func:`hwregress.store.figures.migrate_legacy_details`)."""
    if not isinstance(data, dict) or not isinstance(data.get("test_id"), str):
        return None
    migrate_legacy_details(data)
    if record_problem(data) is not None:
        return None
    try:
        return TestRecord.from_json(data)
    except (TypeError, ValueError):
        return None


def dataclass_values(record: TestRecord) -> dict[str, Any]:
    """The field values of ``record`` (for :func:`record_problem` on a record already built)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
