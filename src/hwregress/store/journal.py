"""The session journal: every finished record appended (fsynced) to a JSON-lines file while the session
runs, so a session that dies hard (segfault, OOM killer, SIGKILL, power loss) still leaves its finished
results and the name of the test it died in.

Each session writes its own ``.results.<session-id>.partial.jsonl`` in the report folder and holds an
exclusive lock (``filelock``, ``flock(2)`` on POSIX) on ``.results.<session-id>.lock`` for its whole life.
The kernel drops the lock when the process dies however it dies, so a journal whose lock can be taken
belongs to a session that is gone: :func:`hwregress.store.recovery.archive_dead_journals` moves only those to the
archive, after appending their finished records to the history that session used (its header names it; none for
``--no-history``) while it holds their lock. Sessions sharing a report folder therefore never touch each other's
journals, and of two sessions starting at once only one recovers a dead journal; a recovering session that dies
between the append and the move leaves the journal to the next one, whose append finds the rows there already (a
journal's rows reach the history once).

Lines, in order::

    {"journal": 1, "session": "host-1234-20260101T120000Z", "pid": 1234, "host": "host", "started_at": "...",
     "hwregress_version": "0.2.0", "history": "/abs/reports/history"}       (history null: --no-history)
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

from hwregress import __version__
from hwregress.store.atomic import open_regular_file
from hwregress.store.figures import migrate_legacy_details
from hwregress.store.history import parse_time
from hwregress.store.results import SessionResults, TestRecord, record_problem

JOURNAL_FORMAT = 1
LEGACY_NAME = ".results.partial.jsonl"  # the single shared journal of hwregress <= 0.1
_PREFIX, _SUFFIX, _LOCK_SUFFIX = ".results.", ".partial.jsonl", ".lock"


class JournalError(ValueError):
    """A journal that cannot be read at all (missing, a folder, no permission); the message names it."""


@dataclass
class JournalRead:
    """A journal read once (:func:`read_journal`): its records, what its header says, and who wrote it.

    Attributes:
        results: the records, the header's fields in ``meta`` (:func:`load_journal`).
        session: the session id: the header's (``host-pid-start``), or for a journal without header (hwregress 0.1's)
            ``journal-`` and the first 16 hex digits of the SHA-256 of its bytes.
        started_at: the session's start (UTC ISO 8601): the header's, or the file's modification time when it has none
            (both survive the move to the archive, so the same file always gets the same identity).
    """

    results: SessionResults
    session: str
    started_at: str

    @property
    def hwregress_version(self) -> str | None:
        """The version of the hwregress that wrote it; None when its header does not say (hwregress 0.1)."""
        version = self.results.meta.get("hwregress_version")
        return version if isinstance(version, str) else None

    @classmethod
    def unreadable(cls, path: Path) -> JournalRead:
        """A journal whose bytes cannot be read (:func:`read_journal` raised): no records, the session id in its file
        name (``.results.<session>.partial.jsonl``; the name itself otherwise) and its modification time.

        Raises:
            OSError: it cannot even be looked at (``stat``).
        """
        lock = journal_lock_path(path)
        session = path.name if lock is None or path.name == LEGACY_NAME else lock.name[len(_PREFIX):-len(_LOCK_SUFFIX)]
        return cls(SessionResults({}, []), session, _modified_at(path.stat().st_mtime))


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
    def start(cls, report_dir: Path, *, history_dir: Path | None, now: _dt.datetime | None = None) -> Journal:
        """Begin this process's journal under ``report_dir``: take its lock, create the file, write the header, which
        names this hwregress's version and ``history_dir`` (absolute; None: ``--no-history``), the history a session
        that recovers the journal appends its records to.

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
                            "started_at": now.isoformat(timespec="seconds"), "hwregress_version": __version__,
                            "history": str(Path(history_dir).absolute()) if history_dir is not None else None})
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


def journal_lock_path(journal: Path) -> Path | None:
    """The lock a session holds while it writes the journal at ``journal``: ``.results.<session>.lock`` beside it
    (``.results.partial.jsonl.lock`` for hwregress 0.1's shared name); None for a file of another name (an archived
    journal, which no session writes)."""
    journal = Path(journal)
    if journal.name == LEGACY_NAME:
        return journal.with_name(LEGACY_NAME + _LOCK_SUFFIX)
    if journal.name.startswith(_PREFIX) and journal.name.endswith(_SUFFIX):
        return journal.with_name(journal.name[: -len(_SUFFIX)] + _LOCK_SUFFIX)
    return None


def session_is_writing(journal: Path) -> bool:
    """Whether a running session holds the lock of the journal at ``journal`` (:func:`journal_lock_path`): its records
    are still being written and are its own to append. A lock file this check had to create is removed again.

    Raises:
        OSError: the lock file cannot be opened or created (a folder without write permission).
    """
    lock_path = journal_lock_path(journal)
    if lock_path is None:
        return False
    existed = lock_path.exists()
    lock = FileLock(str(lock_path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    try:
        if not existed:
            lock_path.unlink(missing_ok=True)  # while held, as Journal.close does
    finally:
        lock.release()
    return False


def _modified_at(mtime: float) -> str:
    return _dt.datetime.fromtimestamp(mtime, _dt.timezone.utc).isoformat(timespec="seconds")


# -- reading -----------------------------------------------------------------------------------------------
def load_journal(path: str | Path) -> SessionResults:
    """The records of a journal, read line by line; the last record per test id wins.

    Lines that cannot be used (not JSON, not an object, a record whose fields have the wrong types, a
    torn last line, bytes that are not UTF-8) are skipped and counted in ``meta["skipped_lines"]``. The
    header's session, pid, host, start and hwregress version go to ``meta`` and the history it names to
    ``meta["history_dir"]`` (None: ``--no-history``; absent when the header does not say); ``meta["died_in"]`` names
    the last test marked running that has no record (``meta["unfinished"]`` lists every such test, in start order).

    Raises:
        JournalError: the file cannot be read at all (missing, a folder or device, no permission).
    """
    return read_journal(path).results


def read_journal(path: str | Path) -> JournalRead:
    """The journal at ``path`` (:func:`load_journal`) and the identity of the session that wrote it, from one read.

    Raises:
        JournalError: the file cannot be read at all (missing, a folder or device, no permission).
    """
    try:
        with open_regular_file(path) as stream:
            raw, mtime = stream.read(), os.fstat(stream.fileno()).st_mtime
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
    session, started = meta.get("session"), meta.get("started_at")
    if not isinstance(session, str) or not session:
        session = f"journal-{hashlib.sha256(raw).hexdigest()[:16]}"
    if not isinstance(started, str) or parse_time(started) is None:
        started = _modified_at(mtime)
    return JournalRead(SessionResults(meta, list(records.values())), session, started)


def _read_line(line: bytes, meta: dict[str, Any], records: dict[str, TestRecord], running: list[str]) -> None:
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and data.get("journal") == JOURNAL_FORMAT and isinstance(data.get("session"), str):
        meta.update(session=data["session"], pid=data.get("pid"), started_at=data.get("started_at"))
        meta["hostname"] = str(data.get("host") or "unknown")
        if isinstance(data.get("hwregress_version"), str):
            meta["hwregress_version"] = data["hwregress_version"]
        if "history" in data and (data["history"] is None or (isinstance(data["history"], str) and data["history"])):
            meta["history_dir"] = data["history"]
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
