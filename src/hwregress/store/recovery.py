"""What a session does with the journals of sessions that are gone (:mod:`hwregress.store.journal`): it appends
their finished records to the history each of them used, then moves them to the archive.

A journal's header names its session's history folder (absolute; null for ``--no-history``), so a crashed session's
records go where that session would have appended them, never into the history of whichever session comes next; a
journal of an older hwregress that names none goes to the recovering session's history, and the line that reports it
says so. The rows carry the dead session's id, start time and hwregress version (left out when its header does not
say), are marked ``interrupted`` unless it closed its journal, and are appended once: the append skips a row whose
session and test id the file holds, so a recovery that died between the append and the move is repeated harmlessly.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from hwregress.store.archive import archive_stem, free_archive_stem
from hwregress.store.history import HistoryStore, parse_time
from hwregress.store.journal import JournalError, JournalRead, journal_lock_path, journal_paths, read_journal

ARCHIVED = "results-{}-unfinished.jsonl"  # a dead session's journal in the archive; {}: its archive_stem


@dataclass
class Recovered:
    """A journal's finished records brought into the session history by :func:`append_to_history`.

    Attributes:
        session: the rows' session id (:attr:`JournalRead.session`).
        started_at: the rows' time (:attr:`JournalRead.started_at`).
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
        session: the session id, as in its history rows (:attr:`JournalRead.session`; for a journal that cannot be
            read, the id in its file name).
        started_at: ISO 8601 UTC start time (:attr:`JournalRead.started_at`; the file's modification time when the
            journal does not say).
        died_in: the test that was running when the session died, None when none was.
        records: number of finished records the journal holds.
        archived: where the journal now lies.
        closed_at: set when the session closed normally but kept its journal (its results were not written).
        history: the history folder its records were appended to (None: it had no records, or its session ran with
            ``--no-history``, or it names no history and this session has none).
        recovered: what reached that history (None when nothing was appended or the append failed).
        history_error: why the append failed (the journal is archived all the same: ``history append`` it later).
        history_assumed: the journal does not name its session's history (an older hwregress's): ``history`` is the
            one of the session that archived it.
    """

    session: str
    started_at: str
    died_in: str | None
    records: int
    archived: Path
    closed_at: str | None = None
    history: Path | None = None
    recovered: Recovered | None = None
    history_error: str | None = None
    history_assumed: bool = False


def archive_dead_journals(report_dir: Path, archive_dir: Path,
                          history: HistoryStore | None = None) -> list[DeadSession]:
    """Move every journal of ``report_dir`` whose session is gone (its lock can be taken) into ``archive_dir`` as
    ``results-<start>-<session>-unfinished.jsonl``, first appending its finished records to the history its header
    names (:func:`history_of`: none for a ``--no-history`` session; ``history``, this session's, for a journal
    of an older hwregress that names none) with :func:`append_to_history` (a history that cannot be written is said in
    :attr:`DeadSession.history_error` and the journal is archived all the same); journals of live sessions are not
    touched. Returns what was archived, oldest first.

    Raises:
        OSError: the archive folder cannot be created or a journal cannot be moved.
    """
    dead = []
    for journal in journal_paths(report_dir):
        lock_path = journal_lock_path(journal)
        assert lock_path is not None  # journal_paths gives journal names only
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
    return sorted(dead, key=lambda d: (d.started_at, d.session))


def _archive(path: Path, archive_dir: Path, current: HistoryStore | None) -> DeadSession:
    try:
        journal = read_journal(path)
    except JournalError:  # kept and archived: its bytes may still be read by hand
        journal = JournalRead.unreadable(path)
    history, assumed = history_of(journal, current) if journal.results.records else (None, False)
    recovered, history_error = None, None
    if history is not None:
        try:
            recovered = append_to_history(journal, history)
        except (OSError, ValueError, Timeout) as error:
            history_error = str(error)
    archive_dir.mkdir(parents=True, exist_ok=True)
    stem = archive_stem(_utc(journal.started_at), journal.session)
    target = archive_dir / ARCHIVED.format(free_archive_stem(archive_dir, stem, [ARCHIVED]))
    path.replace(target)
    meta = journal.results.meta
    return DeadSession(journal.session, journal.started_at, meta.get("died_in"), len(journal.results.records), target,
                       meta.get("closed_at"), history.directory if history is not None else None, recovered,
                       history_error, assumed)


def append_to_history(journal: JournalRead, history: HistoryStore) -> Recovered:
    """Append the finished records of ``journal`` to ``history`` with the session id, start time and hwregress version
    of the session that wrote them, marked interrupted unless the session closed its journal; rows the history holds
    already (the same session id and test id) are not appended again (:meth:`HistoryStore.append_recovered`).

    Raises:
        OSError: the history cannot be read or written.
        ValueError: a row JSON cannot hold, or the history folder cannot hold its hardware key.
        filelock.Timeout: another writer held a history file's lock too long.
    """
    interrupted = journal.results.meta.get("closed_at") is None
    rows, appended = history.append_recovered(journal.results.records, journal.session, journal.started_at,
                                              interrupted, journal.hwregress_version)
    return Recovered(journal.session, journal.started_at, interrupted, rows, appended)


def history_of(journal: JournalRead, current: HistoryStore | None) -> tuple[HistoryStore | None, bool]:
    """The history the records of ``journal`` belong in: the one its header names (None: its session ran with
    ``--no-history``), or ``current`` for a journal that names none (an older hwregress's), and whether it is
    ``current`` for that reason."""
    meta = journal.results.meta
    if "history_dir" in meta:
        return (HistoryStore(meta["history_dir"]) if meta["history_dir"] is not None else None), False
    return current, current is not None


def _utc(text: str) -> _dt.datetime:
    moment = parse_time(text)
    assert moment is not None  # a JournalRead's start is the header's only when it parses
    return moment
